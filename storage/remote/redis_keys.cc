// Redis Cluster addressing without I/O: seed lists ("redis://h:p,h:p") and the
// key slot (CRC16-XMODEM of the key or of its {hash tag}, modulo 16384), as the
// Redis Cluster specification defines them.
#include <array>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/advanced/remote_store.h"

namespace prefixkv {
namespace {

// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection.
constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint16_t crc = static_cast<uint16_t>(byte << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
    table[byte] = crc;
  }
  return table;
}
constexpr std::array<uint16_t, 256> kCrc16Table = MakeCrc16Table();

uint16_t Crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char c : bytes) {
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// "host:port" (or "[v6]:port") with a port in 1..65535; "" when valid.
std::string SeedError(std::string_view seed) {
  const size_t colon = seed.rfind(':');
  if (colon == std::string_view::npos) return "no ':port'";
  std::string_view host = seed.substr(0, colon);
  const std::string_view port = seed.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) return "no host";
  if (host.find_first_of("/@[] ") != std::string_view::npos) return "bad host";
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535) {
    return "bad port";
  }
  return "";
}

}  // namespace

uint16_t RedisKeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) & 16383;
}

StatusOr<std::vector<std::string>> ParseRedisSeeds(std::string_view uri) {
  std::string_view rest = Trim(uri);
  const size_t scheme_end = rest.find("://");
  if (scheme_end != std::string_view::npos) {
    if (rest.substr(0, scheme_end) != "redis") {
      return Status::InvalidArgument("redis seeds '" + std::string(uri) +
                                     "': only the redis:// scheme is supported");
    }
    rest.remove_prefix(scheme_end + 3);
  }
  std::vector<std::string> seeds;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view seed = Trim(rest.substr(0, comma));
    const std::string error = SeedError(seed);
    if (!error.empty()) {
      return Status::InvalidArgument("redis seed '" + std::string(seed) + "' in '" +
                                     std::string(uri) + "': " + error +
                                     " (expected host:port)");
    }
    seeds.emplace_back(seed);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return seeds;
}

}  // namespace prefixkv
