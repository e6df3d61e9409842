# `cmake --install build --prefix PREFIX` installs (docs/library.md):
#   bin/wallfacer                             the CLI
#   share/wallfacer/tokenize                  scripts/tokenize, which --tokenizer of sample and
#                                             generate runs (apps/wallfacer/hf_tokenizer.h)
#   lib/libwallfacer.a, lib/libwallfacer.so*  the library, static and shared
#   include/wallfacer/...                     the public headers (WALLFACER_PUBLIC_HEADERS)
#   lib/cmake/wallfacer/                      the CMake package: find_package(wallfacer), then
#                                             link wallfacer::wallfacer (the shared library)
#   lib/pkgconfig/wallfacer.pc                for pkg-config
include(CMakePackageConfigHelpers)
set(WALLFACER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/wallfacer)

install(TARGETS wallfacer RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/tokenize
        DESTINATION ${CMAKE_INSTALL_DATADIR}/wallfacer)
install(TARGETS wallfacer_static wallfacer_shared EXPORT wallfacerTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(header ${WALLFACER_PUBLIC_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/src/wallfacer/${header}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/wallfacer/${dir})
endforeach()

install(EXPORT wallfacerTargets NAMESPACE wallfacer:: DESTINATION ${WALLFACER_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/wallfacerConfig.cmake.in
  ${PROJECT_BINARY_DIR}/wallfacerConfig.cmake INSTALL_DESTINATION ${WALLFACER_CMAKE_DIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/wallfacerConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/wallfacerConfig.cmake
              ${PROJECT_BINARY_DIR}/wallfacerConfigVersion.cmake
        DESTINATION ${WALLFACER_CMAKE_DIR})

# pkg-config: MPI's flags as this build found them; the prefix is found from the file's place.
set(WALLFACER_PC_CFLAGS "")
foreach(dir ${MPI_CXX_INCLUDE_DIRS})
  string(APPEND WALLFACER_PC_CFLAGS " -I${dir}")
endforeach()
list(JOIN MPI_CXX_LIBRARIES " " WALLFACER_PC_MPI_LIBS)
file(RELATIVE_PATH WALLFACER_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" WALLFACER_PC_TO_PREFIX "${WALLFACER_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/wallfacer.pc.in ${PROJECT_BINARY_DIR}/wallfacer.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/wallfacer.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
