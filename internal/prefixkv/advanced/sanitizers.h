// PREFIXKV_ASAN / PREFIXKV_TSAN: 1 when this translation unit is built with
// AddressSanitizer / ThreadSanitizer. GCC defines __SANITIZE_ADDRESS__ and
// __SANITIZE_THREAD__; clang 14 (the asan, tsan and fuzz presets) only
// answers __has_feature, so code that tests the GCC macros alone sees no
// sanitizer under clang.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define PREFIXKV_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PREFIXKV_ASAN 1
#endif
#endif
#ifndef PREFIXKV_ASAN
#define PREFIXKV_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define PREFIXKV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PREFIXKV_TSAN 1
#endif
#endif
#ifndef PREFIXKV_TSAN
#define PREFIXKV_TSAN 0
#endif
