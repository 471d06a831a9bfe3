# Fails when the source tree loses its structure:
#  - a backend table entry is called anywhere but core/runtime/dispatch.c, the one
#    path from the core into a backend (the entry names are read from
#    backends/backend.h, so a new entry is covered without editing this);
#  - a graph pass tests which op it has (op.def == &ug_op_X) instead of
#    reading the definition's traits: only the file defining an op may;
#  - a layer includes one above it: base/ includes nothing of core/ or
#    backends/, and backends/ and kernels/ nothing of core/;
#  - the backends leave their one layout (backend_layout.cmake: entries
#    named ug_<backend>_<slot>, each family in a file of the same name in
#    every backend, device code in kernels/ and launchers in backends/);
#  - a core folder includes one above it (core_layers.cmake: runtime < ops
#    < model < graph < train, so no circle joins them).
#   cmake -DSOURCE_DIR=<repository root> -P check_structure.cmake
cmake_minimum_required(VERSION 3.16)

# Fails with why, listing each line of the files that matches regex.
function(refuse_lines files regex why)
  set(bad "")
  foreach(path IN LISTS files)
    file(STRINGS "${path}" lines REGEX "${regex}")
    foreach(line IN LISTS lines)
      file(RELATIVE_PATH rel "${SOURCE_DIR}" "${path}")
      string(STRIP "${line}" line)
      list(APPEND bad "${rel}: ${line}")
    endforeach()
  endforeach()
  if(bad)
    list(JOIN bad "\n  " shown)
    message(FATAL_ERROR "${why}:\n  ${shown}")
  endif()
endfunction()

file(READ "${SOURCE_DIR}/backends/backend.h" header)
string(REGEX MATCH "typedef struct ug_backend {.*} ug_backend;" table "${header}")
if(NOT table)
  message(FATAL_ERROR "struct ug_backend not found in backends/backend.h")
endif()
set(entries "")
string(REGEX MATCHALL "ug_[a-z0-9_]+_fn \\*[a-z0-9_]+" slots "${table}")
string(REGEX MATCHALL "\\(\\*[a-z0-9_]+\\)\\(" pointers "${table}")
string(REGEX MATCHALL "X\\(ctx, [A-Z0-9_]+, [a-z0-9_]+," families "${header}")
foreach(item IN LISTS slots pointers families)
  string(REGEX REPLACE "^ug_[a-z0-9_]+_fn \\*|^\\(\\*|\\)\\($|^X\\(ctx, [A-Z0-9_]+, |,$" "" name "${item}")
  list(APPEND entries "${name}")
endforeach()
list(REMOVE_DUPLICATES entries)
list(LENGTH entries count)
if(count LESS 20)
  message(FATAL_ERROR "read only ${count} entries from struct ug_backend: ${entries}")
endif()
list(JOIN entries "|" alternatives)

file(GLOB_RECURSE sources "${SOURCE_DIR}/core/*.c" "${SOURCE_DIR}/core/*.h"
     "${SOURCE_DIR}/tools/*.c")
list(FILTER sources EXCLUDE REGEX "/core/runtime/dispatch\\.c$")
refuse_lines("${sources}" "(->|\\.)(${alternatives})[ \t]*\\("
             "backend entries called outside core/runtime/dispatch.c (call the ug_call_* function or ug_dispatch instead)")
message(STATUS "${count} backend entries, each called only from core/runtime/dispatch.c")

file(GLOB_RECURSE core_sources "${SOURCE_DIR}/core/*.c")
set(defining "")
foreach(path IN LISTS core_sources)
  file(STRINGS "${path}" defs REGEX "^const ug_op_def ug_op_")
  if(defs)
    list(APPEND defining "${path}")
  endif()
endforeach()
set(passes ${core_sources})
list(REMOVE_ITEM passes ${defining})
refuse_lines("${passes}" "[=!]=[ \t]*&ug_op_"
             "tests of op identity outside the ops' own files (give the definition a trait in core/ops/op.h instead)")
list(LENGTH defining files)
message(STATUS "no op identity tested outside the ${files} files defining ops")

# Layers: what each may not include.
foreach(rule "base:core/|backends/" "backends:core/" "kernels:core/")
  string(REPLACE ":" ";" parts "${rule}")
  list(GET parts 0 layer)
  list(GET parts 1 forbidden)
  file(GLOB_RECURSE layer_files "${SOURCE_DIR}/${layer}/*.c" "${SOURCE_DIR}/${layer}/*.h"
       "${SOURCE_DIR}/${layer}/*.cpp" "${SOURCE_DIR}/${layer}/*.hip" "${SOURCE_DIR}/${layer}/*.cl")
  refuse_lines("${layer_files}" "#[ \t]*include[ \t]+\"(${forbidden})"
               "a layer includes one above it (base/ is under core/ and backends/; backends/ and kernels/ see only base/ and backends/backend.h)")
endforeach()
message(STATUS "base/, backends/ and kernels/ include nothing above them")

include("${CMAKE_CURRENT_LIST_DIR}/backend_layout.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/core_layers.cmake")
