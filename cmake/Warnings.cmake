# Compiler warnings, optimisation and sanitizer flags of the project's own targets. Linked only
# inside the build (BUILD_INTERFACE): the installed targets carry none of them. No -march: the
# library runs on any x86-64 CPU, and the hot kernels pick their instruction set at run time
# (cmake/Isa.cmake).
add_library(wallfacer_flags INTERFACE)
target_compile_options(wallfacer_flags INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter)
if(WALLFACER_WERROR)
  target_compile_options(wallfacer_flags INTERFACE -Werror)
endif()
if(CMAKE_BUILD_TYPE STREQUAL "Release" OR CMAKE_BUILD_TYPE STREQUAL "RelWithDebInfo")
  target_compile_options(wallfacer_flags INTERFACE -O3)
endif()
if(WALLFACER_SANITIZE)
  target_compile_options(wallfacer_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                                   -fno-sanitize-recover=undefined)
  target_link_options(wallfacer_flags INTERFACE -fsanitize=address,undefined)
endif()
