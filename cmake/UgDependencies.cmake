# Finds what each backend needs and records, per backend, whether it is in
# and why not (UG_BACKEND_SUMMARY, printed at the end of configure).
include(FindPkgConfig)
set(UG_BACKEND_SUMMARY "")

# CPU backend: OpenBLAS through CBLAS for GEMM (required: the CPU device is
# always present).
pkg_check_modules(OPENBLAS IMPORTED_TARGET openblas)
if(NOT OPENBLAS_FOUND)
  message(FATAL_ERROR "OpenBLAS not found: install libopenblas-dev (the CPU backend uses it for GEMM)")
endif()
list(APPEND UG_BACKEND_SUMMARY "cpu: in (OpenBLAS ${OPENBLAS_VERSION})")

# zlib: the IDX reader reads gzip-compressed data sets (MNIST ships as .gz).
find_package(ZLIB)
if(NOT ZLIB_FOUND)
  message(FATAL_ERROR "zlib not found: install zlib1g-dev (the IDX data set reader uses it for .gz files)")
endif()

# OpenCL backend: the ICD loader and CLBlast.
set(UG_HAVE_OPENCL OFF)
if(UG_WITH_OPENCL)
  find_package(OpenCL QUIET)
  find_package(CLBlast QUIET)
  if(NOT OpenCL_FOUND)
    list(APPEND UG_BACKEND_SUMMARY "opencl: out (OpenCL ICD loader/headers not found: install ocl-icd-opencl-dev opencl-c-headers)")
  elseif(NOT CLBlast_FOUND)
    list(APPEND UG_BACKEND_SUMMARY "opencl: out (CLBlast not found: install libclblast-dev)")
  else()
    set(UG_HAVE_OPENCL ON)
    list(APPEND UG_BACKEND_SUMMARY "opencl: in (OpenCL ${OpenCL_VERSION_STRING}, CLBlast)")
  endif()
else()
  list(APPEND UG_BACKEND_SUMMARY "opencl: out (UG_WITH_OPENCL=OFF)")
endif()
