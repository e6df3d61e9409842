# Every dependency comes from Debian's packages (scripts/install-deps installs them).
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(fmt REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
# oneDNN (libdnnl-dev): the bf16 dense products (kernels/dense_bf16.h). Its CMake config also
# finds OpenCL (ocl-icd-opencl-dev), which its target names.
find_package(dnnl CONFIG REQUIRED)
if(WALLFACER_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
