# Compiler warnings, optimisation and sanitizer flags shared by every target
# (wallfacer_base_flags), and wallfacer_flags = those plus -march=native when WALLFACER_NATIVE.
add_library(wallfacer_base_flags INTERFACE)
target_compile_options(wallfacer_base_flags INTERFACE -Wall -Wextra -Wpedantic -Wshadow
                                                      -Wno-unused-parameter)
if(WALLFACER_WERROR)
  target_compile_options(wallfacer_base_flags INTERFACE -Werror)
endif()
if(CMAKE_BUILD_TYPE STREQUAL "Release" OR CMAKE_BUILD_TYPE STREQUAL "RelWithDebInfo")
  target_compile_options(wallfacer_base_flags INTERFACE -O3)
endif()
if(WALLFACER_SANITIZE)
  target_compile_options(wallfacer_base_flags INTERFACE -fsanitize=address,undefined
                                                        -fno-omit-frame-pointer
                                                        -fno-sanitize-recover=undefined)
  target_link_options(wallfacer_base_flags INTERFACE -fsanitize=address,undefined)
endif()

add_library(wallfacer_flags INTERFACE)
target_link_libraries(wallfacer_flags INTERFACE wallfacer_base_flags)
if(WALLFACER_NATIVE)
  target_compile_options(wallfacer_flags INTERFACE -march=native)
endif()
