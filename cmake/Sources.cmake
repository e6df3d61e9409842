# wallfacer_library_sources(OUT [MODULE]): the library's sources as they are compiled: every .cpp
# under src/wallfacer (under src/wallfacer/MODULE only, with MODULE), the hot kernels
# (WALLFACER_ISA_SOURCES) replaced by their per-level files (cmake/Isa.cmake), without the
# *_avx512.cpp and *_amx.cpp files (compiled apart with their own -m flags where the compiler has
# them; src/wallfacer/CMakeLists.txt). The module libraries (cmake/Layers.cmake) and the fuzz build take
# their sources from here.
set(WALLFACER_ISA_SOURCES kernels/attention.cpp kernels/attention_bf16.cpp kernels/ops.cpp)  # below src/wallfacer

function(wallfacer_library_sources out)
  set(dir ${PROJECT_SOURCE_DIR}/src/wallfacer)
  set(under ${dir})
  if(ARGC GREATER 1)
    set(under ${dir}/${ARGV1})
  endif()
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${under}/*.cpp)
  list(FILTER sources EXCLUDE REGEX "_(avx512|amx)\\.cpp$")
  set(isa)
  foreach(src ${WALLFACER_ISA_SOURCES})
    set(path ${dir}/${src})
    if(path IN_LIST sources)
      list(APPEND isa ${path})
    endif()
  endforeach()
  if(isa)
    list(REMOVE_ITEM sources ${isa})
  endif()
  wallfacer_isa_sources(generated ${isa})
  set(${out} ${sources} ${generated} PARENT_SCOPE)
endfunction()
