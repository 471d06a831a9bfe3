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

# oneDNN, optional: the CPU backend's convolution kernels, run on OpenMP.
# Debian's package config also requires OpenCL (oneDNN's GPU runtime) and
# stops the configure without it, so it is only asked for when OpenCL is
# there.
set(UG_HAVE_ONEDNN OFF)
if(UG_WITH_ONEDNN)
  find_package(OpenCL QUIET)
  if(OpenCL_FOUND)
    find_package(dnnl CONFIG QUIET)
  endif()
  find_package(OpenMP COMPONENTS C QUIET)
  if(TARGET DNNL::dnnl AND TARGET OpenMP::OpenMP_C)
    set(UG_HAVE_ONEDNN ON)
    list(APPEND UG_BACKEND_SUMMARY "cpu convolutions: oneDNN ${dnnl_VERSION}")
  else()
    list(APPEND UG_BACKEND_SUMMARY "cpu convolutions: im2col + OpenBLAS (oneDNN not found: install libdnnl-dev)")
  endif()
else()
  list(APPEND UG_BACKEND_SUMMARY "cpu convolutions: im2col + OpenBLAS (UG_WITH_ONEDNN=OFF)")
endif()

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
    # CLBlast is C++, and reading its own parameters takes its C++ API
    # (backends/opencl/clblast_database.cpp): the compiler that CLBlast's
    # users need anyway. Enabled here, at the top, where the library is.
    enable_language(CXX)
    list(APPEND UG_BACKEND_SUMMARY "opencl: in (OpenCL ${OpenCL_VERSION_STRING}, CLBlast)")
  endif()
else()
  list(APPEND UG_BACKEND_SUMMARY "opencl: out (UG_WITH_OPENCL=OFF)")
endif()
