# cmake -DIN=<launcher.hip> -DOUT=<launcher.cpp> -P launch_to_call.cmake
#
# Makes a .hip launcher file (backends/hip/) compile with g++ against the
# emulated runtime by rewriting each kernel launch
#     name<T><<<grid, block, shared, stream>>>(args);
# into a call of the emulator
#     ug_emu_launcher(grid, block, shared, stream).run(name<T>, args);
# Everything else is left as it is. `<<<...>>>` is not C++ and no macro can
# spell it, so one textual step is needed; doing it in CMake at build time
# keeps the test free of Python and reruns it whenever the .hip file changes.
# A #line directive keeps compiler messages pointing into the .hip file
# (the rewrite never adds or removes a line).
file(READ "${IN}" src)
set(launch "([A-Za-z_][A-Za-z0-9_]*(<[A-Za-z0-9_, ]*>)?)<<<([^;]*)>>>\\(([^;]*)\\);")
string(REGEX REPLACE "${launch}" "ug_emu_launcher(\\3).run(\\1, \\4);" out "${src}")
if(out MATCHES "<<<|>>>")
  message(FATAL_ERROR "${IN}: a kernel launch that launch_to_call.cmake cannot rewrite "
                      "(one statement of the form name<<<...>>>(...);)")
endif()
file(WRITE "${OUT}" "#line 1 \"${IN}\"\n${out}")
