# `cmake --install`: the static libraries behind prefixkv::prefixkv, the
# public headers (include/prefixkv/*.h and the generated version.h; the
# headers under internal/ are the tiers' plumbing no public header includes,
# so they stay out), the `prefixkv` CLI and `prefixkv-bench` beside it (`prefixkv bench`
# runs it), and the files users find it with:
#   lib/cmake/prefixkv/prefixkvConfig.cmake (+ ConfigVersion, Targets,
#     Dependencies)  find_package(prefixkv) -> prefixkv::prefixkv
#   lib/pkgconfig/prefixkv.pc                 pkg-config --cflags --libs prefixkv
# tests/install/install_test.sh builds examples/cpp against both
# (docs/install.md).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(prefixkv_modules GLOBAL PROPERTY PREFIXKV_MODULES)
set(prefixkv_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/prefixkv)

target_include_directories(prefixkv INTERFACE
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
install(TARGETS prefixkv ${prefixkv_modules} EXPORT prefixkvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS prefixkv_cli prefixkv_bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/prefixkv/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/prefixkv
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/prefixkv/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/prefixkv)

install(EXPORT prefixkvTargets NAMESPACE prefixkv:: DESTINATION ${prefixkv_cmake_dir})
configure_package_config_file(cmake/prefixkvConfig.cmake.in
  ${PROJECT_BINARY_DIR}/prefixkvConfig.cmake INSTALL_DESTINATION ${prefixkv_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/prefixkvConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)  # 0.x: a minor release may break the API
install(FILES ${PROJECT_BINARY_DIR}/prefixkvConfig.cmake
              ${PROJECT_BINARY_DIR}/prefixkvConfigVersion.cmake
              cmake/prefixkvDependencies.cmake
        DESTINATION ${prefixkv_cmake_dir})

# prefixkv.pc: the libraries in the umbrella target's order (users first, the
# base last: static link order), then
# their dependencies' own .pc files (static archives: they go in Libs and
# Requires, not the .private fields).
set(PREFIXKV_PC_LIBS "")
get_target_property(prefixkv_link_order prefixkv INTERFACE_LINK_LIBRARIES)
foreach(m IN LISTS prefixkv_link_order)
  string(APPEND PREFIXKV_PC_LIBS " -l${m}")
endforeach()
# The prefix relative to the .pc file, so `cmake --install --prefix P` (chosen
# after configuring) gives a .pc that points into P.
file(RELATIVE_PATH PREFIXKV_PC_UP /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" PREFIXKV_PC_UP "${PREFIXKV_PC_UP}")
configure_file(cmake/prefixkv.pc.in ${PROJECT_BINARY_DIR}/prefixkv.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/prefixkv.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
