# Decides whether the Python package is built (included by the top-level
# CMakeLists.txt when PREFIXKV_PYTHON is on) and sets PREFIXKV_PYTHON_FOUND.
#
# Not with sanitizers or fuzzing: their runtimes and a Python interpreter that
# loads an instrumented extension do not mix (the asan, tsan and fuzz presets
# build the C++ tests only). Otherwise it needs Python 3 with numpy and
# Debian's pybind11 (tools/run installs python3-dev, python3-numpy,
# python3-pytest and pybind11-dev); the interpreter defaults to the system's
# /usr/bin/python3, the one those packages install into, when it exists (a
# pyenv or venv python first on PATH would lack numpy).
# When it builds, every library is position-independent code: the extension
# module is a shared object that links the static libraries.
set(PREFIXKV_PYTHON_FOUND OFF)
if(NOT PREFIXKV_SANITIZE STREQUAL "" OR PREFIXKV_FUZZ)
  message(STATUS "prefixkv: Python package off (sanitizer or fuzz build)")
  return()
endif()
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python 3 interpreter")
endif()
find_package(Python3 COMPONENTS Interpreter Development.Module)
find_package(pybind11 CONFIG QUIET)
if(NOT Python3_FOUND OR NOT pybind11_FOUND)
  message(STATUS "prefixkv: Python package off (no Python 3 development files or "
                 "no pybind11; tools/run installs them)")
  return()
endif()
execute_process(COMMAND ${Python3_EXECUTABLE} -c "import numpy"
                RESULT_VARIABLE numpy_missing OUTPUT_QUIET ERROR_QUIET)
if(numpy_missing)
  message(STATUS "prefixkv: Python package off (${Python3_EXECUTABLE} has no numpy)")
  return()
endif()
message(STATUS "prefixkv: Python package on (${Python3_EXECUTABLE})")
set(PREFIXKV_PYTHON_FOUND ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
