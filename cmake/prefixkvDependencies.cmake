# The libraries prefixkv links, found the same way by the build
# (CMakeLists.txt) and by users' find_package(prefixkv) (prefixkvConfig.cmake
# includes this installed copy): RocksDB and zstd through their CMake packages,
# xxHash and hiredis by header and library (Debian ships no CMake package for
# them), each wrapped in an imported target the exported libraries name.
#
# In the build every dependency is REQUIRED. In prefixkvConfig.cmake
# (PREFIXKV_FIND_FOR_CONFIG set) a missing one sets prefixkv_FOUND to false
# with a message naming it, as find_dependency does.
include(CMakeFindDependencyMacro)

macro(prefixkv_find_package)
  if(PREFIXKV_FIND_FOR_CONFIG)
    find_dependency(${ARGN})
  else()
    find_package(${ARGN} REQUIRED)
  endif()
endmacro()

# prefixkv_find_library(TARGET HEADER LIBRARY PREFIX): PREFIX_INCLUDE_DIR and
# PREFIX_LIBRARY, and the imported target TARGET carrying both.
function(prefixkv_find_library target header library prefix)
  find_path(${prefix}_INCLUDE_DIR ${header})
  find_library(${prefix}_LIBRARY NAMES ${library})
  if(NOT ${prefix}_INCLUDE_DIR OR NOT ${prefix}_LIBRARY)
    set(message "prefixkv needs ${library} (${header} and lib${library}; Debian: lib${library}-dev)")
    if(PREFIXKV_FIND_FOR_CONFIG)
      set(prefixkv_FOUND FALSE PARENT_SCOPE)
      set(prefixkv_NOT_FOUND_MESSAGE "${message}" PARENT_SCOPE)
      return()
    endif()
    message(FATAL_ERROR "${message}")
  endif()
  if(NOT TARGET ${target})
    # GLOBAL in the build: a project that add_subdirectory()s prefixkv links
    # these through prefixkv::prefixkv from its own directories.
    set(scope)
    if(NOT PREFIXKV_FIND_FOR_CONFIG)
      set(scope GLOBAL)
    endif()
    add_library(${target} UNKNOWN IMPORTED ${scope})
    set_target_properties(${target} PROPERTIES
      IMPORTED_LOCATION "${${prefix}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${${prefix}_INCLUDE_DIR}")
  endif()
endfunction()

prefixkv_find_package(Threads)
prefixkv_find_package(RocksDB CONFIG)
prefixkv_find_package(zstd CONFIG)
prefixkv_find_library(prefixkv::xxhash xxhash.h xxhash XXHASH)
if(NOT DEFINED prefixkv_FOUND OR prefixkv_FOUND)
  prefixkv_find_library(prefixkv::hiredis hiredis/hiredis.h hiredis HIREDIS)
endif()
