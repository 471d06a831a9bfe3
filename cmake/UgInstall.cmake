# Installs libunigrad (shared and static), the public headers, a CMake
# package (find_package(unigrad) -> unigrad::unigrad, unigrad::unigrad_static)
# and unigrad.pc. Included by the top CMakeLists once both library targets
# exist. The run-time backend modules install themselves (backends/hip).
include(CMakePackageConfigHelpers)

set(UG_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/unigrad
    CACHE STRING "Where unigradConfig.cmake is installed, relative to the prefix")
mark_as_advanced(UG_INSTALL_CMAKEDIR)

if(NOT TARGET unigrad::unigrad_static)
  add_library(unigrad::unigrad_static ALIAS unigrad_static)
endif()

install(TARGETS unigrad unigrad_static
  EXPORT unigradTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
          NAMELINK_COMPONENT development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/unigrad
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT development
  FILES_MATCHING PATTERN "*.h")
install(EXPORT unigradTargets
  NAMESPACE unigrad::
  DESTINATION ${UG_INSTALL_CMAKEDIR} COMPONENT development)

# 0.x: a minor version may change the API, so only the same minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/unigradConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/unigradConfig.cmake.in
  ${PROJECT_BINARY_DIR}/unigradConfig.cmake
  INSTALL_DESTINATION ${UG_INSTALL_CMAKEDIR})
install(FILES ${PROJECT_BINARY_DIR}/unigradConfig.cmake
              ${PROJECT_BINARY_DIR}/unigradConfigVersion.cmake
  DESTINATION ${UG_INSTALL_CMAKEDIR} COMPONENT development)

# --- Link dependencies of the static library ------------------------------
# Backends add their libraries to unigrad_objects from their own folders, some
# perhaps after this file runs, so the list is collected at the end of the
# top-level configure. Each dependency becomes a plain name (-lNAME), plus
# -L<dir> when its folder is not one the linker searches anyway: imported
# targets hold absolute build-machine paths that would not travel.

# Appends to out_var the plain link items that item stands for.
function(_ug_link_items item out_var depth)
  set(items "")
  if(depth GREATER 8)
    set(${out_var} "" PARENT_SCOPE)
    return()
  endif()
  math(EXPR next "${depth} + 1")
  if(item MATCHES "^::@")
    # CMake's marker for links added from another directory: not a library.
  elseif(item MATCHES "^\\$<BUILD_INTERFACE:(.*)>$" OR item MATCHES "^\\$<LINK_ONLY:(.*)>$")
    _ug_link_items("${CMAKE_MATCH_1}" items ${next})
  elseif(item MATCHES "^\\$<")
    # Other generator expressions (INSTALL_INTERFACE, config conditions) are
    # not dependencies of the built library.
  elseif(item STREQUAL "Threads::Threads")
    # glibc >= 2.34 needs no flag, older ones -lpthread; naming it always is
    # harmless.
    set(items pthread)
  elseif(TARGET "${item}")
    get_target_property(type "${item}" TYPE)
    get_target_property(imported "${item}" IMPORTED)
    set(location "")
    if(imported AND NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(location "${item}" IMPORTED_LOCATION)
      if(NOT location)
        get_target_property(configs "${item}" IMPORTED_CONFIGURATIONS)
        foreach(cfg IN LISTS configs)
          string(TOUPPER "${cfg}" cfg)
          get_target_property(location "${item}" IMPORTED_LOCATION_${cfg})
          if(location)
            break()
          endif()
        endforeach()
      endif()
    endif()
    if(location)
      _ug_link_items("${location}" items ${next})
    elseif(NOT imported AND type MATCHES "^(SHARED|STATIC)_LIBRARY$")
      # One of ours that is not part of libunigrad: not expected, and a
      # consumer could not link it by name.
      message(WARNING "unigrad_static links target ${item}, which is not installed")
    endif()
    if(imported OR type STREQUAL "OBJECT_LIBRARY" OR type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(deps "${item}" INTERFACE_LINK_LIBRARIES)
      if(NOT imported AND type STREQUAL "OBJECT_LIBRARY")
        get_target_property(deps "${item}" LINK_LIBRARIES)
      endif()
      if(deps)
        foreach(dep IN LISTS deps)
          _ug_link_items("${dep}" sub ${next})
          list(APPEND items ${sub})
        endforeach()
      endif()
    endif()
  elseif(item MATCHES "^-l(.+)$")
    set(items "${CMAKE_MATCH_1}")
  elseif(item STREQUAL "-pthread")
    set(items pthread)
  elseif(item MATCHES "^-")
    set(items "${item}")
  elseif(IS_ABSOLUTE "${item}")
    get_filename_component(dir "${item}" DIRECTORY)
    get_filename_component(file "${item}" NAME)
    if(file MATCHES "^lib(.+)\\.(so|a)(\\.[0-9.]+)?$")
      set(items "${CMAKE_MATCH_1}")
      list(FIND CMAKE_C_IMPLICIT_LINK_DIRECTORIES "${dir}" implicit)
      if(implicit EQUAL -1)
        list(PREPEND items "-L${dir}")
      endif()
    else()
      set(items "${item}")
    endif()
  elseif(item)
    set(items "${item}")
  endif()
  set(${out_var} "${items}" PARENT_SCOPE)
endfunction()

function(_ug_finish_install)
  set(deps "")
  foreach(target unigrad_objects unigrad_static)
    get_target_property(links ${target} LINK_LIBRARIES)
    if(links)
      foreach(link IN LISTS links)
        if(link STREQUAL "unigrad_objects" OR link MATCHES "^\\$<BUILD_INTERFACE:unigrad_objects>$")
          continue()
        endif()
        _ug_link_items("${link}" items 0)
        list(APPEND deps ${items})
      endforeach()
    endif()
  endforeach()
  # The core always needs these, whatever the targets above say; last, since
  # the libraries before them may use them too.
  set(system_libs pthread ${CMAKE_DL_LIBS} m)
  list(REMOVE_ITEM deps ${system_libs})
  list(APPEND deps ${system_libs})
  list(REMOVE_DUPLICATES deps)
  # Libraries first, so e.g. -lclblast comes before the -lOpenCL it uses.
  set(search_dirs "")
  set(libs "")
  foreach(dep IN LISTS deps)
    if(dep MATCHES "^-L")
      list(APPEND search_dirs "${dep}")
    else()
      list(APPEND libs "${dep}")
    endif()
  endforeach()
  set(static_deps ${search_dirs} ${libs})
  set_property(GLOBAL PROPERTY UG_STATIC_LINK_DEPENDENCIES "${static_deps}")

  target_link_libraries(unigrad_static INTERFACE "$<INSTALL_INTERFACE:${static_deps}>")

  set(libs_private "")
  foreach(dep IN LISTS static_deps)
    if(dep MATCHES "^-")
      string(APPEND libs_private " ${dep}")
    else()
      string(APPEND libs_private " -l${dep}")
    endif()
  endforeach()
  string(STRIP "${libs_private}" UG_PC_LIBS_PRIVATE)

  # unigrad.pc names its prefix relative to its own folder, so the files
  # stay usable wherever `cmake --install --prefix` puts them.
  set(pcdir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  if(IS_ABSOLUTE "${pcdir}")
    set(UG_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  else()
    file(RELATIVE_PATH up /prefix/${pcdir} /prefix)
    string(REGEX REPLACE "/$" "" up "${up}")
    set(UG_PC_PREFIX "\${pcfiledir}/${up}")
  endif()
  foreach(kind LIBDIR INCLUDEDIR)
    if(IS_ABSOLUTE "${CMAKE_INSTALL_${kind}}")
      set(UG_PC_${kind} "${CMAKE_INSTALL_${kind}}")
    else()
      set(UG_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
    endif()
  endforeach()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/unigrad.pc.in ${PROJECT_BINARY_DIR}/unigrad.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/unigrad.pc DESTINATION ${pcdir} COMPONENT development)
endfunction()

cmake_language(DEFER CALL _ug_finish_install)
