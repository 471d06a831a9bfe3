# The backends' layout, included by check_structure.cmake (SOURCE_DIR set).
# Read against the kernel families of backends/backend.h (UG_KERNEL_FAMILIES,
# UG_OPTIONAL_KERNEL_FAMILIES) and whatever folders backends/ holds, so a
# new family or a fourth backend is covered without editing this. Fails
# when
#  - one naming scheme breaks: backends/<name>/ declares its entries with
#    UG_BACKEND_KERNELS(ug_<name>) and fills its table with
#    UG_BACKEND_TABLE(..., ug_<name>); defines every family (an optional
#    one where it has it) as ug_<name>_<slot>, with the family's signature;
#    names every other function of a family's signature that other files
#    see ug_<name>_*; and sets table entries by hand only to
#    ug_<name>_<entry>;
#  - the file names differ: a family's entry is defined in a file of the
#    same base name (elementwise, reduce, ...) in every backend that has it;
#  - device code and launchers mix: no kernels/ file defines a launcher
#    (a function taking a ug_bdev) or includes a backends/ header other
#    than backends/backend.h (the argument structs its kernels take).

file(READ "${SOURCE_DIR}/backends/backend.h" layout_header)
set(slots "")
set(optional_slots "")
foreach(list_name UG_KERNEL_FAMILIES UG_OPTIONAL_KERNEL_FAMILIES)
  # The macro's definition, continued lines included.
  string(REGEX MATCH "#define ${list_name}\\(X, ctx\\)([^\n]*\\\\\n)*[^\n]*" definition "${layout_header}")
  string(REGEX MATCHALL "X\\(ctx, [A-Z0-9_]+, [a-z0-9_]+, ug_[a-z0-9_]+_args\\)" rows "${definition}")
  if(NOT rows)
    message(FATAL_ERROR "no X(ctx, NAME, slot, args) rows read from ${list_name} in backends/backend.h")
  endif()
  foreach(row IN LISTS rows)
    string(REGEX REPLACE "^X\\(ctx, [A-Z0-9_]+, ([a-z0-9_]+), (ug_[a-z0-9_]+_args)\\)$" "\\1;\\2" parts "${row}")
    list(GET parts 0 slot)
    list(GET parts 1 args_of_${slot})
    list(APPEND slots ${slot})
    if(list_name STREQUAL "UG_OPTIONAL_KERNEL_FAMILIES")
      list(APPEND optional_slots ${slot})
    endif()
  endforeach()
endforeach()
set(family_args "")
foreach(slot IN LISTS slots)
  list(APPEND family_args ${args_of_${slot}})
endforeach()

# A definition on one line: [static] ug_status NAME(ug_bdev *dev, ...
set(definition_regex "^(static[ \t]+)?ug_status[ \t]+[A-Za-z0-9_]+[ \t]*\\(ug_bdev[ \t]*\\*[^;]*$")
# ... and one of a family's signature: (ug_bdev *dev, const ARGS *a)
set(signature_regex
    "^(static[ \t]+)?ug_status[ \t]+([A-Za-z0-9_]+)[ \t]*\\(ug_bdev[ \t]*\\*[A-Za-z0-9_]*, const (ug_[a-z0-9_]+_args) \\*[A-Za-z0-9_]*\\)[ \t]*$")

set(naming "")   # breaks of the naming scheme
set(homes "")    # "<slot> <backend>/<file>" for every family entry defined
file(GLOB backend_dirs LIST_DIRECTORIES true "${SOURCE_DIR}/backends/*")
set(backends "")
foreach(dir IN LISTS backend_dirs)
  if(NOT IS_DIRECTORY "${dir}")
    continue()
  endif()
  get_filename_component(backend "${dir}" NAME)
  list(APPEND backends ${backend})
  set(prefix "ug_${backend}")
  file(GLOB files "${dir}/*.c" "${dir}/*.cpp" "${dir}/*.hip" "${dir}/*.h")
  list(SORT files)
  set(kernels_declared FALSE)
  set(table_filled FALSE)
  foreach(path IN LISTS files)
    file(RELATIVE_PATH rel "${SOURCE_DIR}" "${path}")
    get_filename_component(base "${path}" NAME_WE)

    # Code lines only (no comment's mention); a line's ';' splits it in two.
    file(STRINGS "${path}" uses REGEX "^[^/*]*UG_BACKEND_(KERNELS|TABLE)\\(")
    foreach(use IN LISTS uses)
      if(NOT use MATCHES "UG_BACKEND_")
        continue()
      elseif(use MATCHES "UG_BACKEND_KERNELS\\(${prefix}\\)")
        set(kernels_declared TRUE)
      elseif(use MATCHES "ug_backend ([A-Za-z0-9_]+) = UG_BACKEND_TABLE\\([^,]+, ${prefix}\\)")
        set(table_filled TRUE)
        # Entries set by hand on the table, after the macro.
        set(table "${CMAKE_MATCH_1}")
        file(STRINGS "${path}" sets REGEX "^[ \t]*${table}\\.[a-z0-9_]+[ \t]*=")
        foreach(line IN LISTS sets)
          if(line MATCHES "^[ \t]*${table}\\.([a-z0-9_]+)[ \t]*=[ \t]*([A-Za-z0-9_]+)")
            set(entry "${CMAKE_MATCH_1}")
            set(value "${CMAKE_MATCH_2}")
            if(NOT value STREQUAL "NULL" AND NOT value STREQUAL "${prefix}_${entry}")
              list(APPEND naming "${rel}: table entry ${entry} set to ${value}, not ${prefix}_${entry}")
            endif()
          endif()
        endforeach()
      else()
        string(REGEX MATCH "UG_BACKEND_(KERNELS|TABLE)\\([^)]*\\)" call "${use}")
        list(APPEND naming "${rel}: ${call} (the prefix is ${prefix})")
      endif()
    endforeach()

    file(STRINGS "${path}" definitions REGEX "${signature_regex}")
    foreach(line IN LISTS definitions)
      if(NOT line MATCHES "${signature_regex}")
        continue()
      endif()
      set(static_kw "${CMAKE_MATCH_1}")
      set(name "${CMAKE_MATCH_2}")
      set(args "${CMAKE_MATCH_3}")
      string(REGEX REPLACE "^${prefix}_" "" slot "${name}")
      if(slot IN_LIST slots AND NOT name STREQUAL slot)
        if(NOT args STREQUAL args_of_${slot})
          list(APPEND naming "${rel}: ${name} takes ${args}, not ${args_of_${slot}}")
        elseif(DEFINED home_${backend}_${slot})
          list(APPEND naming "${rel}: ${name} defined again (also in ${home_${backend}_${slot}})")
        else()
          set(home_${backend}_${slot} "${rel}")
          list(APPEND homes "${slot} ${backend}/${base}")
        endif()
      elseif(NOT static_kw AND args IN_LIST family_args AND NOT name MATCHES "^${prefix}_")
        list(APPEND naming "${rel}: ${name} has a kernel family's signature but not the prefix ${prefix}_")
      endif()
    endforeach()
  endforeach()
  if(NOT kernels_declared)
    list(APPEND naming "backends/${backend}/: no UG_BACKEND_KERNELS(${prefix}) declaring its entries")
  endif()
  if(NOT table_filled)
    list(APPEND naming "backends/${backend}/: no table filled by UG_BACKEND_TABLE(..., ${prefix})")
  endif()
  foreach(slot IN LISTS slots)
    if(NOT DEFINED home_${backend}_${slot} AND NOT slot IN_LIST optional_slots)
      list(APPEND naming "backends/${backend}/: no definition of ${prefix}_${slot} (on one line: ug_status \
${prefix}_${slot}(ug_bdev *dev, const ${args_of_${slot}} *a))")
    endif()
  endforeach()
endforeach()

# One base name per family across the backends.
set(scattered "")
foreach(slot IN LISTS slots)
  set(bases "")
  set(where "")
  foreach(home IN LISTS homes)
    if(home MATCHES "^${slot} ([a-z0-9_]+)/([A-Za-z0-9_]+)$")
      list(APPEND bases "${CMAKE_MATCH_2}")
      list(APPEND where "${CMAKE_MATCH_1}/${CMAKE_MATCH_2}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES bases)
  list(LENGTH bases distinct)
  if(distinct GREATER 1)
    list(JOIN where ", " shown)
    list(APPEND scattered "${slot}: ${shown}")
  endif()
endforeach()

# kernels/: device code only.
file(GLOB_RECURSE kernel_files "${SOURCE_DIR}/kernels/*.c" "${SOURCE_DIR}/kernels/*.h"
     "${SOURCE_DIR}/kernels/*.cpp" "${SOURCE_DIR}/kernels/*.hip" "${SOURCE_DIR}/kernels/*.cl")
set(mixed "")
foreach(path IN LISTS kernel_files)
  file(RELATIVE_PATH rel "${SOURCE_DIR}" "${path}")
  file(STRINGS "${path}" includes REGEX "#[ \t]*include[ \t]+[\"<]backends/")
  foreach(line IN LISTS includes)
    if(NOT line MATCHES "[\"<]backends/backend\\.h[\">]")
      string(STRIP "${line}" line)
      list(APPEND mixed "${rel}: ${line}")
    endif()
  endforeach()
  file(STRINGS "${path}" launchers REGEX "${definition_regex}")
  foreach(line IN LISTS launchers)
    list(APPEND mixed "${rel}: ${line}")
  endforeach()
endforeach()

set(failed FALSE)
foreach(rule
    "naming:backends break the one naming scheme ug_<backend>_<slot> (backends/backend.h, UG_BACKEND_KERNELS)"
    "scattered:a kernel family's entries sit in files of different names (give it the same file name in every backend)"
    "mixed:kernels/ holds launchers or includes a backend's header (device code in kernels/<dialect>/, launchers in backends/<name>/; kernels/ may include only backends/backend.h)")
  string(REGEX REPLACE ":.*$" "" what "${rule}")
  string(REGEX REPLACE "^[a-z]+:" "" why "${rule}")
  if(${what})
    list(JOIN ${what} "\n  " shown)
    message(SEND_ERROR "${why}:\n  ${shown}")
    set(failed TRUE)
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "the backends' layout is broken (tests/structure/backend_layout.cmake)")
endif()
list(LENGTH slots family_count)
list(LENGTH homes entry_count)
list(JOIN backends ", " backend_list)
message(STATUS "${family_count} kernel families, ${entry_count} entries in backends ${backend_list}: "
               "named ug_<backend>_<slot>, each family in one file name; kernels/ holds device code only")
