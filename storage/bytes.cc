// SharedBytes allocation and slicing.
#include "prefixkv/bytes.h"

#include <cassert>
#include <cstdlib>
#include <cstring>
#include <new>

namespace prefixkv {

SharedBytes SharedBytes::Copy(const void* data, size_t size) {
  uint8_t* out = nullptr;
  SharedBytes b = Allocate(size, &out);
  if (size > 0) std::memcpy(out, data, size);
  return b;
}

SharedBytes SharedBytes::Adopt(std::string&& s) {
  auto owner = std::make_shared<const std::string>(std::move(s));
  const auto* data = reinterpret_cast<const uint8_t*>(owner->data());
  size_t size = owner->size();
  return SharedBytes(std::move(owner), data, size);
}

SharedBytes SharedBytes::Allocate(size_t size, uint8_t** writable) {
  constexpr size_t kAlign = 64;
  size_t rounded = (size + kAlign - 1) / kAlign * kAlign;
  if (rounded == 0) rounded = kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) throw std::bad_alloc();
  auto* bytes = static_cast<uint8_t*>(p);
  std::memset(bytes + size, 0, rounded - size);  // defined padding, never read
  if (writable != nullptr) *writable = bytes;
  std::shared_ptr<const void> owner(
      p, [](const void* q) { std::free(const_cast<void*>(q)); });
  return SharedBytes(std::move(owner), bytes, size);
}

SharedBytes SharedBytes::Slice(size_t offset, size_t length) const {
  assert(offset <= size_ && length <= size_ - offset);
  return SharedBytes(owner_, data_ + offset, length);
}

}  // namespace prefixkv
