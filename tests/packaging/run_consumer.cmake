# Installs the built unigrad into a fresh temporary prefix, then builds and
# runs the consumer program outside the build tree against it, the way a
# user would. Run with cmake -P and:
#   MODE        cmake (find_package) or pkgconfig (pkg-config --cflags --libs)
#   BUILD_DIR   the unigrad build to install
#   CONSUMER    folder holding consumer.c and its CMakeLists.txt
#   LIBDIR      CMAKE_INSTALL_LIBDIR of that build (relative)
#   C_COMPILER, C_FLAGS, LINK_FLAGS, GENERATOR, PKG_CONFIG
# C_FLAGS and LINK_FLAGS carry the library's sanitizer flags: an ASan-built
# library only loads into an ASan-built program.
cmake_minimum_required(VERSION 3.20)

foreach(var MODE BUILD_DIR CONSUMER LIBDIR C_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: ${var} is not set")
  endif()
endforeach()

set(tmp_root "$ENV{TMPDIR}")
if(NOT tmp_root)
  set(tmp_root /tmp)
endif()
execute_process(COMMAND mktemp -d "${tmp_root}/unigrad-${MODE}.XXXXXX"
  OUTPUT_VARIABLE tmp OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mktemp failed in ${tmp_root}")
endif()
set(prefix ${tmp}/prefix)

# Runs a command; on failure prints its output and stops, keeping ${tmp}.
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n  ${ARGN}\n${out}\n(files kept in ${tmp})")
  endif()
  message(STATUS "${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step("install into ${prefix}" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
file(COPY ${CONSUMER}/consumer.c ${CONSUMER}/CMakeLists.txt DESTINATION ${tmp}/src)

separate_arguments(c_flags UNIX_COMMAND "${C_FLAGS}")
separate_arguments(link_flags UNIX_COMMAND "${LINK_FLAGS}")

if(MODE STREQUAL "cmake")
  set(generator_args "")
  if(GENERATOR)
    set(generator_args -G "${GENERATOR}")
  endif()
  step("configure with find_package(unigrad)"
    ${CMAKE_COMMAND} -S ${tmp}/src -B ${tmp}/build ${generator_args}
      -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${C_COMPILER}
      "-DCMAKE_C_FLAGS=${C_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}"
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
  step("build" ${CMAKE_COMMAND} --build ${tmp}/build)
  set(shared_exe ${tmp}/build/consumer_shared)
  set(static_exe ${tmp}/build/consumer_static)
elseif(MODE STREQUAL "pkgconfig")
  if(NOT PKG_CONFIG)
    set(PKG_CONFIG pkg-config)
  endif()
  # Only the temporary prefix may answer, not a system-wide unigrad.
  set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
  set(ENV{PKG_CONFIG_LIBDIR} ${prefix}/${LIBDIR}/pkgconfig)
  step("pkg-config --cflags --libs unigrad" ${PKG_CONFIG} --cflags --libs unigrad)
  separate_arguments(pc_shared UNIX_COMMAND "${step_output}")
  step("pkg-config --static --cflags --libs unigrad" ${PKG_CONFIG} --static --cflags --libs unigrad)
  separate_arguments(pc_static UNIX_COMMAND "${step_output}")
  # -lunigrad would pick the .so next to the .a; -l:libunigrad.a forces the
  # archive so Libs.private is what resolves its dependencies.
  list(TRANSFORM pc_static REPLACE "^-lunigrad$" "-l:libunigrad.a")
  step("pkg-config --variable=libdir unigrad" ${PKG_CONFIG} --variable=libdir unigrad)
  string(STRIP "${step_output}" libdir)
  set(strict -std=c11 -Wall -Wextra -Werror)
  set(shared_exe ${tmp}/consumer_shared)
  set(static_exe ${tmp}/consumer_static)
  step("compile and link against libunigrad.so"
    ${C_COMPILER} ${c_flags} ${strict} ${tmp}/src/consumer.c ${pc_shared} ${link_flags}
      -Wl,-rpath,${libdir} -o ${shared_exe})
  step("compile and link against libunigrad.a"
    ${C_COMPILER} ${c_flags} ${strict} ${tmp}/src/consumer.c ${pc_static} ${link_flags}
      -o ${static_exe})
else()
  message(FATAL_ERROR "MODE must be cmake or pkgconfig, not '${MODE}'")
endif()

# The static program must not need libunigrad.so, or it tested nothing.
execute_process(COMMAND readelf -d ${static_exe} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(rc EQUAL 0 AND dynamic MATCHES "libunigrad\\.so")
  message(FATAL_ERROR "${static_exe} links libunigrad.so, not the static library")
endif()

step("run consumer_shared" ${shared_exe})
message(STATUS "${step_output}")
step("run consumer_static" ${static_exe})
message(STATUS "${step_output}")

file(REMOVE_RECURSE ${tmp})
