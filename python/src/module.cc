// prefixkv._prefixkv: the extension module behind the Python package prefixkv
// (python/prefixkv/__init__.py re-exports it; docs/python.md).
#include "py_types.h"

PYBIND11_MODULE(_prefixkv, m) {
  m.doc() =
      "prefixkv: a paged prefix-cache storage engine for LLM inference (C++20 core). "
      "See docs/python.md.";
  // The exception classes live in prefixkv/errors.py; import it now so a
  // missing file fails at import, not at the first error.
  pybind11::module_::import("prefixkv.errors");
  prefixkv::python::BindEngine(m);
  prefixkv::python::BindRecords(m);
}
