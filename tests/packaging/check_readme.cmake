# Fails unless README.md contains tests/packaging/readme_example.c verbatim
# and examples/cnn.c and examples/gpt.c from their first #include (the
# "Training from C" and "Training a GPT from C" sections), and .ci/run installs the README's packages and runs its test
# command.
# Run with cmake -P and -DSOURCE_DIR=<repository root>.
file(READ ${SOURCE_DIR}/README.md readme)
file(READ ${SOURCE_DIR}/tests/packaging/readme_example.c example)
string(FIND "${readme}" "```c\n${example}```" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md does not contain tests/packaging/readme_example.c verbatim "
    "in a ```c block: copy the file's text into the README")
endif()

file(READ ${SOURCE_DIR}/examples/cnn.c cnn)
string(FIND "${cnn}" "#include" code_start)
string(SUBSTRING "${cnn}" ${code_start} -1 cnn_code)
string(FIND "${readme}" "```c\n${cnn_code}```" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md does not show examples/cnn.c (from its first #include) verbatim in a "
    "```c block: copy the file's code into the \"Training from C\" section")
endif()

file(READ ${SOURCE_DIR}/examples/gpt.c gpt)
string(FIND "${gpt}" "#include" code_start)
string(SUBSTRING "${gpt}" ${code_start} -1 gpt_code)
string(FIND "${readme}" "```c\n${gpt_code}```" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md does not show examples/gpt.c (from its first #include) verbatim in a "
    "```c block: copy the file's code into the \"Training a GPT from C\" section")
endif()

file(READ ${SOURCE_DIR}/.ci/run ci)
if(NOT readme MATCHES "apt-get install -y ([a-z0-9 .+-]+) &&")
  message(FATAL_ERROR "README.md has no 'apt-get install -y PACKAGES &&' command")
endif()
set(packages "${CMAKE_MATCH_1}")
string(FIND "${ci}" "${packages}" at)
if(at EQUAL -1)
  message(FATAL_ERROR ".ci/run does not install the README's packages:\n  ${packages}")
endif()
set(test_command "cmake -S . -B build && cmake --build build -j && ctest --test-dir build --output-on-failure")
string(FIND "${readme}" "${test_command}" in_readme)
string(FIND "${ci}" "${test_command}" in_ci)
if(in_readme EQUAL -1 OR in_ci EQUAL -1)
  message(FATAL_ERROR "README.md and .ci/run must both run: ${test_command}")
endif()
