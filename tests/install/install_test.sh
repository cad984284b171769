#!/usr/bin/env bash
# Install.TheReadmeExampleBuildsAgainstTheInstall (tests/CMakeLists.txt):
# `cmake --install` of the build to a temporary prefix, then the README's C++
# example (examples/cpp/quickstart.cc, checked to be the README's snippet
# verbatim) configured, built and run against that prefix twice: with
# find_package(prefixkv) and with `pkg-config --cflags --libs prefixkv`.
# Every step is bounded; the prefix is removed at exit.
#
#   install_test.sh SOURCE_DIR BUILD_DIR CXX LIBDIR
set -euo pipefail
src=$1 build=$2 cxx=$3 libdir=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step() { echo "== $*"; }
bounded() { timeout 180 "$@"; }

step "the README's C++ snippet is examples/cpp/quickstart.cc"
# The block after the marker line, up to its closing fence.
awk '/^<!-- examples\/cpp\/quickstart.cc -->$/ {m=1; next}
     m==1 && /^```cpp$/ {m=2; next}
     m==2 && /^```$/ {exit}
     m==2 {print}' "$src/README.md" >"$work/readme_snippet.cc"
if ! diff -u "$src/examples/cpp/quickstart.cc" "$work/readme_snippet.cc"; then
  echo "FAIL: README.md's C++ snippet differs from examples/cpp/quickstart.cc (above)"
  exit 1
fi

step "cmake --install $build --prefix $work/prefix"
bounded cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" ||
  { cat "$work/install.log"; exit 1; }
for f in include/prefixkv/engine.h include/prefixkv/version.h bin/prefixkv bin/prefixkv-bench \
         "$libdir/cmake/prefixkv/prefixkvConfig.cmake" "$libdir/pkgconfig/prefixkv.pc"; do
  [ -e "$work/prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
for internal in "$src"/internal/prefixkv/*.h "$src"/internal/prefixkv/advanced/*.h; do
  name=${internal#"$src"/internal/prefixkv/}
  if [ -e "$work/prefix/include/prefixkv/$name" ]; then
    echo "FAIL: internal header $name installed (no public header needs it)"
    exit 1
  fi
done
step "every installed header compiles on its own (no public header needs an internal one)"
for header in "$work"/prefix/include/prefixkv/*.h; do
  echo "#include \"prefixkv/${header##*/}\"" |
    bounded "$cxx" -std=c++20 -fsyntax-only -I"$work/prefix/include" -x c++ - ||
    { echo "FAIL: installed ${header##*/} does not compile alone"; exit 1; }
done
"$work/prefix/bin/prefixkv" --version
"$work/prefix/bin/prefixkv" bench --help >/dev/null ||
  { echo "FAIL: the installed prefixkv bench does not find prefixkv-bench"; exit 1; }

step "find_package(prefixkv): configure, build, run"
bounded cmake -S "$src/examples/cpp" -B "$work/cmake-build" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_FIND_PACKAGE_NO_SYSTEM_PACKAGE_REGISTRY=ON \
  >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
bounded cmake --build "$work/cmake-build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
bounded "$work/cmake-build/quickstart" "$work/data-cmake"

step "pkg-config --cflags --libs prefixkv: build, run"
export PKG_CONFIG_PATH="$work/prefix/$libdir/pkgconfig"
flags=$(pkg-config --cflags --libs prefixkv)
echo "pkg-config: $flags"
# shellcheck disable=SC2086
bounded "$cxx" -std=c++20 -o "$work/quickstart-pc" "$src/examples/cpp/quickstart.cc" $flags
bounded "$work/quickstart-pc" "$work/data-pc"
echo "PASS"
