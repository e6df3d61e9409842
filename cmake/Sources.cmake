# wallfacer_library_sources(OUT): the library's sources as they are compiled: every .cpp under
# src/wallfacer, the hot kernels (WALLFACER_ISA_SOURCES) replaced by their per-level files
# (cmake/Isa.cmake), without the *_avx512.cpp files (compiled apart with their own -m flags where
# the compiler has them; src/wallfacer/CMakeLists.txt). The library and the fuzz build both take
# their sources from here.
set(WALLFACER_ISA_SOURCES kernels/attention.cpp kernels/attention_bf16.cpp kernels/ops.cpp)  # below src/wallfacer

function(wallfacer_library_sources out)
  set(dir ${PROJECT_SOURCE_DIR}/src/wallfacer)
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${dir}/*.cpp)
  list(FILTER sources EXCLUDE REGEX "_avx512\\.cpp$")
  list(TRANSFORM WALLFACER_ISA_SOURCES PREPEND ${dir}/ OUTPUT_VARIABLE isa)
  list(REMOVE_ITEM sources ${isa})
  wallfacer_isa_sources(generated ${isa})
  set(${out} ${sources} ${generated} PARENT_SCOPE)
endfunction()
