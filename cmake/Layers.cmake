# The library's modules as libraries of their own, so that the linker keeps the layers of
# docs/architecture.md ("Modules and what they may use"): each folder of src/wallfacer is a static
# library that links exactly the modules it may use and its own third-party libraries, and a layer
# check that fails to link when the module calls into any other module.
#
# wallfacer_module(NAME [USES module...] [PUBLIC lib...] [PRIVATE lib...] [OBJECTS obj...])
#   wallfacer_NAME_objects  the module's sources (wallfacer_library_sources(... NAME),
#                           cmake/Sources.cmake), compiled once, as position-independent code; the
#                           combined libwallfacer (static and shared) is made of these objects too
#   wallfacer_NAME          the static library: those objects and OBJECTS, linking wallfacer_M for
#                           every M in USES (modules declared before it), the PUBLIC libraries (its
#                           headers expose them) and the PRIVATE ones
#   wallfacer_NAME_layer    its layer check (wallfacer_layer_check below)
# USES is recorded (global property WALLFACER_USES_NAME; WALLFACER_MODULES lists the modules in
# order) and written out by wallfacer_write_modules for ctest layering.
#
# wallfacer_layer_check(TARGET OBJECTS obj... [USES module...] [LIBS PUBLIC|PRIVATE lib...]): the
# shared library TARGET of the objects (in build/layers/, never installed), linked with
# --no-undefined against the layer checks of exactly the modules in USES (and the PUBLIC libraries
# they name) and LIBS (as target_link_libraries takes them), and with --no-copy-dt-needed-entries so
# that a module reached only through another one resolves nothing: a call into a module outside
# USES fails this link ("undefined reference", or "DSO missing from command line"). Not under the
# sanitizers (their runtime is resolved at the program's link): there it does nothing.
function(wallfacer_layer_check target)
  cmake_parse_arguments(ARG "" "" "OBJECTS;USES;LIBS" ${ARGN})
  if(WALLFACER_SANITIZE)
    return()
  endif()
  set(layers)
  foreach(m ${ARG_USES})
    list(APPEND layers wallfacer_${m}_layer)
  endforeach()
  add_library(${target} SHARED ${ARG_OBJECTS})
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/layers)
  target_link_libraries(${target} PRIVATE ${layers})
  target_link_libraries(${target} ${ARG_LIBS})
  target_link_options(${target} PRIVATE -Wl,--no-undefined -Wl,--no-copy-dt-needed-entries)
endfunction()

function(wallfacer_module name)
  cmake_parse_arguments(ARG "" "" "USES;PUBLIC;PRIVATE;OBJECTS" ${ARGN})
  set(uses)
  foreach(m ${ARG_USES})
    if(NOT TARGET wallfacer_${m})
      message(FATAL_ERROR "wallfacer_module(${name}): it uses ${m}, which is not a module declared "
                          "before it: declare ${m} first (src/wallfacer/CMakeLists.txt)")
    endif()
    list(APPEND uses wallfacer_${m})
  endforeach()
  wallfacer_library_sources(sources ${name})

  set(objects wallfacer_${name}_objects)
  add_library(${objects} OBJECT ${sources})
  # The static libraries only gather objects: no module waits for another's archive to compile.
  set_target_properties(${objects} PROPERTIES POSITION_INDEPENDENT_CODE ON OPTIMIZE_DEPENDENCIES ON)
  target_link_libraries(${objects} PRIVATE ${uses} ${ARG_PUBLIC} ${ARG_PRIVATE} wallfacer_flags)
  target_include_directories(${objects} PRIVATE ${PROJECT_SOURCE_DIR}/src)

  add_library(wallfacer_${name} STATIC $<TARGET_OBJECTS:${objects}> ${ARG_OBJECTS})
  set_target_properties(wallfacer_${name} PROPERTIES OPTIMIZE_DEPENDENCIES ON)
  target_include_directories(wallfacer_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(wallfacer_${name} PUBLIC ${uses} ${ARG_PUBLIC} PRIVATE ${ARG_PRIVATE})

  wallfacer_layer_check(wallfacer_${name}_layer OBJECTS $<TARGET_OBJECTS:${objects}> ${ARG_OBJECTS}
                        USES ${ARG_USES} LIBS PUBLIC ${ARG_PUBLIC} PRIVATE ${ARG_PRIVATE})
  set_property(GLOBAL APPEND PROPERTY WALLFACER_MODULES ${name})
  set_property(GLOBAL PROPERTY WALLFACER_USES_${name} ${ARG_USES})
endfunction()

# wallfacer_write_modules(FILE): one line per module, "NAME: USES..." (the modules it may use).
function(wallfacer_write_modules file)
  get_property(modules GLOBAL PROPERTY WALLFACER_MODULES)
  set(text "")
  foreach(m ${modules})
    get_property(uses GLOBAL PROPERTY WALLFACER_USES_${m})
    list(JOIN uses " " uses)
    string(APPEND text "${m}: ${uses}\n")
  endforeach()
  file(CONFIGURE OUTPUT ${file} CONTENT "${text}" @ONLY)
endfunction()
