#!/usr/bin/env python3
"""Fails when an #include runs against prefixkv's layering (docs/architecture.md).

The modules and what each may use come from CMakeLists.txt itself (every
`prefixkv_module(NAME DIR DEPS...)` line), so the build and this check cannot
disagree. The shared headers (public ones in include/prefixkv/, internal ones in
internal/prefixkv/, both included as "prefixkv/...") are owned by one module
each (OWNERS below: a new header must be added there). The rules:

  1. A public header (include/prefixkv/) includes only the standard library
     and other public headers, never an internal one (internal/prefixkv/,
     the tiers' plumbing shared by modules, tools and tests, not installed):
     the embedder's API does not depend on the tiers' internals. An internal
     header includes the standard library and prefixkv/ headers of either
     root. No name exists in both roots (an include names one file).
  2. A module's files include public headers of modules it depends on
     (directly or transitively), and private headers of its own folder, by
     bare name. Never another module's private header.
  3. Third-party headers (RocksDB, Boost, zstd, xxHash) appear only in the
     modules that link them (THIRD_PARTY below), never in include/.
  4. tools/ includes public headers and tools/ headers, never src/ or storage/.
  5. tests/ include public headers, tests/ and tools/ headers, and private
     headers of the folder they mirror (tests/X mirrors src/X or storage/X).

Run from anywhere: python3 tools/check_layering.py [--root DIR]. Exit 0 when
clean, 1 with one line per violation.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if len(sys.argv) == 3 and sys.argv[1] == "--root":
    ROOT = os.path.abspath(sys.argv[2])

# Which module owns each public header (the module whose code implements it).
OWNERS = {
    "status.h": "prefixkv_base",
    "bytes.h": "prefixkv_base",
    "memory_resource.h": "prefixkv_base",
    "clock.h": "prefixkv_base",
    "tensor.h": "prefixkv_base",
    "block.h": "prefixkv_base",
    "block_key.h": "prefixkv_base",
    "advanced/hash.h": "prefixkv_base",
    "advanced/mutex.h": "prefixkv_base",
    "advanced/sanitizers.h": "prefixkv_base",
    "file_system.h": "prefixkv_base",
    "tier_types.h": "prefixkv_base",
    "kv_events.h": "prefixkv_base",
    "advanced/kv_event_sink.h": "prefixkv_base",
    "remote_counter_fields.h": "prefixkv_base",
    "tier_counter_fields.h": "prefixkv_base",
    "version.h": "prefixkv_base",  # generated from version.h.in (CMakeLists.txt)
    "prefix_token_fields.h": "prefixkv_base",  # a table over tier_types.h
    "advanced/tier.h": "prefixkv_base",
    "codec.h": "prefixkv_codec",
    "advanced/hot_tier.h": "prefixkv_hot",
    "advanced/shared_hot_budget.h": "prefixkv_hot",
    "advanced/eviction_policy.h": "prefixkv_hot",
    "advanced/ssd_tier.h": "prefixkv_ssd",
    "advanced/tier_stack.h": "prefixkv_stack",
    "advanced/ssd_admission.h": "prefixkv_stack",
    "advanced/capacity_advisor.h": "prefixkv_stack",
    "advanced/remote_store.h": "prefixkv_remote",
    "advanced/remote_tier.h": "prefixkv_remote",
    "namespace_spec.h": "prefixkv_core",
    "advanced/prefix_cache.h": "prefixkv_cache",
    "advanced/tip_lineage.h": "prefixkv_cache",
    "prefix_types.h": "prefixkv_cache",
    "engine.h": "prefixkv_engine",
    "advanced/engine_internals.h": "prefixkv_engine",
    "shard_computation.h": "prefixkv_model",
    "layer_kv_cache.h": "prefixkv_model",
    "kv_recipe.h": "prefixkv_model",
    "reference_model.h": "prefixkv_model",
    "session.h": "prefixkv_session",
    "boundary_adapter.h": "prefixkv_session",
    "server.h": "prefixkv_server",
    "router.h": "prefixkv_router",
}

# tests/fuzz/ targets and the folder whose private headers each drives.
FUZZ_MIRRORS = {"resp_fuzzer.cc": "src/server", "codec_fuzzer.cc": "storage/codec"}
# tests/support/ files that use one folder's private helpers.
SUPPORT_MIRRORS = {"mem_tier.cc": "storage/hot"}

# Third-party include prefixes and the folders allowed to use them.
THIRD_PARTY = {
    "rocksdb/": ["storage/ssd", "tests/storage/ssd"],
    "boost/": ["storage/hot", "src/server"],
    "zstd": ["storage/codec"],
    "hiredis/": ["storage/remote", "tests/storage/remote", "tools/redis", "tools/route"],
    # The hash itself, and two places that measure or check against raw XXH3.
    "xxh": ["storage/base", "tools/bench/bench_core.cc", "tests/core/block_key_test.cc"],
}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def read_modules():
    """{name: (dir, [deps])} from CMakeLists.txt's prefixkv_module() calls."""
    text = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    text = re.sub(r"#[^\n]*", "", text)
    modules = {}
    for m in re.finditer(r"prefixkv_module\(([^)]*)\)", text):
        words = m.group(1).split()
        if words[0] == "NAME" or "$" in m.group(1):
            continue  # the function definition itself
        modules[words[0]] = (words[1], words[2:])
    return modules


def closure(modules):
    """{name: set of modules it may use, itself included}."""
    out = {}

    def visit(name, seen):
        for dep in modules.get(name, ("", []))[1]:
            if dep in modules and dep not in seen:
                seen.add(dep)
                visit(dep, seen)
        return seen

    for name in modules:
        out[name] = visit(name, {name})
    return out


def files_under(folder, exts=(".h", ".cc")):
    base = os.path.join(ROOT, folder)
    for dirpath, _, names in os.walk(base):
        for n in sorted(names):
            if n.endswith(exts):
                yield os.path.relpath(os.path.join(dirpath, n), ROOT)


def includes(path):
    text = open(os.path.join(ROOT, path), errors="replace").read()
    for m in INCLUDE_RE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        yield line, m.group(1) == "<", m.group(2)


def third_party_ok(path, inc):
    for prefix, allowed in THIRD_PARTY.items():
        if inc.startswith(prefix):
            return any(path == a or path.startswith(a + "/") for a in allowed)
    return True


def main():
    modules = read_modules()
    allowed = closure(modules)
    dir_to_module = {d: name for name, (d, _) in modules.items()}
    errors = []

    def err(path, line, msg):
        errors.append(f"{path}:{line}: {msg}")

    def is_public(inc):
        return os.path.exists(os.path.join(ROOT, "include", inc)) or \
            os.path.exists(os.path.join(ROOT, "include", inc + ".in"))

    def check_public(path, line, inc, user):
        header = inc[len("prefixkv/"):]
        owner = OWNERS.get(header)
        if owner is None:
            if not is_public(inc) and not os.path.exists(os.path.join(ROOT, "internal", inc)):
                err(path, line, f'"{inc}" does not exist')
            else:
                err(path, line, f'"{inc}" has no owner in tools/check_layering.py OWNERS')
            return
        if user is not None and owner not in allowed[user]:
            err(path, line, f'{user} may not use "{inc}" (owned by {owner}, '
                            f"not among its dependencies in CMakeLists.txt)")

    # 1. Public and internal headers.
    for root in ("include", "internal"):
        for path in files_under(root + "/prefixkv", (".h",)):
            header = path[len(root + "/prefixkv/"):]
            owner = OWNERS.get(header)
            if owner is None:
                err(path, 1, "header has no owner in tools/check_layering.py OWNERS")
            if root == "internal" and is_public("prefixkv/" + header):
                err(path, 1, "the same name is a public header too")
            for line, angle, inc in includes(path):
                if angle:
                    if "/" in inc or "." in inc:  # C++ standard headers: <vector>, <cstdint>
                        err(path, line, f"shared header includes <{inc}>: standard "
                                        "library and prefixkv/ headers only")
                    continue
                if not inc.startswith("prefixkv/"):
                    err(path, line, f'shared header includes "{inc}"')
                    continue
                if root == "include" and not is_public(inc):
                    err(path, line, f'public header includes internal "{inc}"')
                check_public(path, line, inc, owner)

    # 2, 3. Modules.
    for name, (folder, _) in sorted(modules.items()):
        for path in files_under(folder):
            for line, angle, inc in includes(path):
                if angle:
                    if not third_party_ok(path, inc):
                        err(path, line, f"<{inc}> is not for {folder}/")
                    continue
                if inc.startswith("prefixkv/"):
                    check_public(path, line, inc, name)
                elif "/" in inc or not os.path.exists(os.path.join(ROOT, folder, inc)):
                    err(path, line, f'"{inc}" is not a public header nor a header of '
                                    f"{folder}/ (include own headers by bare name)")

    # 4. Tools.
    for path in files_under("tools"):
        for line, angle, inc in includes(path):
            if angle:
                if not third_party_ok(path, inc):
                    err(path, line, f"<{inc}> is not for tools/")
                continue
            if inc.startswith("prefixkv/"):
                check_public(path, line, inc, None)
            elif inc.startswith("tools/"):
                if not os.path.exists(os.path.join(ROOT, inc)):
                    err(path, line, f'"{inc}" does not exist')
            elif not os.path.exists(os.path.join(ROOT, os.path.dirname(path), inc)):
                err(path, line, f'"{inc}": tools include public and tools/ headers only')

    # 5. Tests (tests/data holds fixtures, not code).
    for path in files_under("tests"):
        if path.startswith("tests/data/"):
            continue
        rel = os.path.dirname(path)[len("tests/"):]
        mirror = None
        for folder in dir_to_module:
            if folder.split("/", 1)[-1] == rel or folder == rel:
                mirror = folder
        if rel == "tools":
            mirror = "tools/replay"
        if rel == "fuzz":
            mirror = FUZZ_MIRRORS.get(os.path.basename(path))
        if rel == "support":
            mirror = SUPPORT_MIRRORS.get(os.path.basename(path))
        for line, angle, inc in includes(path):
            if angle:
                if not third_party_ok(path, inc):
                    err(path, line, f"<{inc}> is not for {os.path.dirname(path)}/")
                continue
            if inc.startswith("prefixkv/"):
                check_public(path, line, inc, None)
            elif inc.startswith(("tests/", "tools/")):
                if not os.path.exists(os.path.join(ROOT, inc)):
                    err(path, line, f'"{inc}" does not exist')
            elif mirror and "/" not in inc and os.path.exists(
                    os.path.join(ROOT, mirror, inc)):
                pass
            else:
                err(path, line, f'"{inc}" is not a public, tests/ or tools/ header nor '
                                f"a private header of the folder this test mirrors")

    for e in errors:
        print(e)
    if errors:
        print(f"check_layering: {len(errors)} include(s) against the layering "
              "(see tools/check_layering.py)")
        return 1
    print(f"check_layering: clean ({len(modules)} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
