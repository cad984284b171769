// The block record codec (codec.h; the byte layout is docs/format.md): the
// encoder, with optional zstd per tensor, and the decoder every tier's bytes go
// through on the way back. The decoder treats its input as hostile: every
// length and count is checked against DecodeLimits and the buffer before it is
// used, the layout must be the canonical one (zero padding included), and the
// checksum covers the uncompressed bytes, so a damaged or forged record is
// Corruption, never a crash or a record with wrong bytes. Raw tensors are
// views into the encoded buffer: decoding copies nothing it does not have to.
#include "prefixkv/codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "prefixkv/advanced/hash.h"

namespace prefixkv {
namespace {

constexpr uint16_t kFlagHasTokens = 1u << 0;
constexpr uint16_t kFlagPartial = 1u << 1;
constexpr uint16_t kKnownFlags = kFlagHasTokens | kFlagPartial;
constexpr uint8_t kLayerPlaceholder = 1u << 0;
constexpr uint8_t kEncodingRaw = 0;
constexpr uint8_t kEncodingZstd = 1;
constexpr size_t kChecksumOffset = 24;
constexpr size_t kHashChunk = 256 * 1024;  // copy+hash chunk that stays in L2

size_t AlignUp(size_t n) {
  return (n + kRecordTensorAlignment - 1) / kRecordTensorAlignment *
         kRecordTensorAlignment;
}

// ---- writing ---------------------------------------------------------------

class Writer {
 public:
  explicit Writer(uint8_t* out) : out_(out) {}
  void U8(uint8_t v) { out_[pos_++] = v; }
  void U16(uint16_t v) {
    for (int i = 0; i < 2; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void Key(const BlockKey& k) {
    k.EncodeTo(out_ + pos_);
    pos_ += 16;
  }
  void Bytes(const void* p, size_t n) {
    if (n) std::memcpy(out_ + pos_, p, n);
    pos_ += n;
  }
  void Str(const std::string& s) {
    U16(static_cast<uint16_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  size_t pos() const { return pos_; }

 private:
  uint8_t* out_;
  size_t pos_ = 0;
};

// One tensor as it will be stored: where its raw bytes are (`runs` runs of
// `run_bytes`, run r at `src + r * src_stride`: one run for a whole tensor,
// one per outer row for token rows of a larger tensor), and whether they are
// stored raw or as a zstd frame.
struct StoredTensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // as encoded
  const uint8_t* src = nullptr;
  size_t runs = 1;
  size_t run_bytes = 0;
  size_t src_stride = 0;
  uint8_t encoding = kEncodingRaw;
  std::string compressed;  // when encoding == zstd
  size_t offset = 0;
  size_t raw_len() const { return runs * run_bytes; }
  size_t stored_len() const {
    return encoding == kEncodingZstd ? compressed.size() : raw_len();
  }
};

Status CheckEncodable(const BlockRecord& r, const DecodeLimits& lim) {
  if (r.layers.size() > lim.max_layers) return Status::InvalidArgument("too many layers");
  if (!r.tokens.empty() && r.tokens.size() != r.token_count) {
    return Status::InvalidArgument("tokens.size() != token_count");
  }
  if (r.token_count > lim.max_tokens) return Status::InvalidArgument("too many tokens");
  for (const LayerState& l : r.layers) {
    if (l.cache_type.size() > lim.max_string_bytes) {
      return Status::InvalidArgument("cache type name too long");
    }
    if (l.meta.size() > lim.max_meta_entries)
      return Status::InvalidArgument("meta too long");
    for (const std::string& m : l.meta) {
      if (m.size() > lim.max_string_bytes)
        return Status::InvalidArgument("meta entry too long");
    }
    if (l.tensors.size() > lim.max_tensors_per_layer) {
      return Status::InvalidArgument("too many tensors in layer");
    }
    if (l.placeholder && !l.tensors.empty()) {
      return Status::InvalidArgument("a placeholder layer carries no tensors");
    }
    for (const Tensor& t : l.tensors) {
      PKV_RETURN_IF_ERROR(Tensor::Make(t.dtype(), t.shape(), t.bytes()).status());
      if (t.ndim() > lim.max_ndim) return Status::InvalidArgument("too many dimensions");
    }
  }
  return Status::OK();
}

// Where tensor `t`'s bytes to encode are: all of them, or `rows` of it.
// REQUIRES: `t` passed CheckEncodable.
StatusOr<StoredTensor> Describe(const Tensor& t, const std::optional<TokenRows>& rows,
                                const DecodeLimits& lim) {
  StoredTensor st;
  st.dtype = t.dtype();
  st.shape = t.shape();
  st.src = t.data();
  st.run_bytes = t.nbytes();
  st.src_stride = t.nbytes();
  if (rows.has_value()) {
    if (t.ndim() < 2) {
      return Status::InvalidArgument("token rows of " + t.DebugString() +
                                     ", which has no token axis");
    }
    const size_t axis = t.ndim() - 2;
    const int64_t len = t.dim(axis);
    if (rows->start < 0 || rows->length < 0 || rows->start > len ||
        rows->length > len - rows->start) {
      return Status::InvalidArgument("token rows [" + std::to_string(rows->start) +
                                     ", +" + std::to_string(rows->length) + ") outside " +
                                     t.DebugString());
    }
    size_t outer = 1;
    for (size_t i = 0; i < axis; ++i) outer *= static_cast<size_t>(t.dim(i));
    const size_t row = static_cast<size_t>(t.dim(axis + 1)) * DTypeSize(t.dtype());
    st.shape[axis] = rows->length;
    // (No offset into an empty tensor, whose data may be null.)
    if (t.nbytes() > 0) st.src = t.data() + row * static_cast<size_t>(rows->start);
    st.run_bytes = row * static_cast<size_t>(rows->length);
    st.src_stride = row * static_cast<size_t>(len);
    // Runs that follow each other in the source are one run.
    st.runs = st.run_bytes == st.src_stride ? 1 : outer;
    if (st.runs == 1) st.run_bytes *= outer;
  }
  if (st.raw_len() > lim.max_tensor_bytes)
    return Status::InvalidArgument("tensor too large");
  return st;
}

void MaybeCompress(StoredTensor& st, const EncodeOptions& opt) {
  const size_t raw = st.raw_len();
  if (!opt.compress || raw < opt.min_compress_bytes) return;
  std::string gathered;  // zstd takes one buffer: gather the runs first
  const uint8_t* input = st.src;
  if (st.runs > 1) {
    gathered.resize(raw);
    for (size_t r = 0; r < st.runs; ++r) {
      std::memcpy(gathered.data() + r * st.run_bytes, st.src + r * st.src_stride,
                  st.run_bytes);
    }
    input = reinterpret_cast<const uint8_t*>(gathered.data());
  }
  std::string buf(ZSTD_compressBound(raw), '\0');
  size_t n = ZSTD_compress(buf.data(), buf.size(), input, raw, opt.zstd_level);
  if (ZSTD_isError(n)) return;
  if (static_cast<double>(n) >
      static_cast<double>(raw) * (1.0 - opt.min_compression_gain)) {
    return;
  }
  buf.resize(n);
  st.encoding = kEncodingZstd;
  st.compressed = std::move(buf);
}

size_t HeaderLength(const BlockRecord& r, bool with_tokens) {
  size_t n = kRecordFixedHeaderBytes + (with_tokens ? 4 * r.tokens.size() : 0);
  for (const LayerState& l : r.layers) {
    n += 2 + l.cache_type.size() + 2 + 2;
    for (const std::string& m : l.meta) n += 2 + m.size();
    for (const Tensor& t : l.tensors) n += 4 + 8 * t.ndim() + 16;
  }
  return n;
}

// Copies `n` bytes to `out` and feeds them to the checksum in chunks that are
// still in cache when hashed: one pass over the source.
void CopyAndHash(uint8_t* out, const uint8_t* src, size_t n, HashStream* state) {
  for (size_t done = 0; done < n; done += kHashChunk) {
    const size_t k = std::min(kHashChunk, n - done);
    std::memcpy(out + done, src + done, k);
    state->Update(out + done, k);
  }
}

// Writes the header of `r` (checksum field zero) with its tensors as `stored`.
void WriteHeader(const BlockRecord& r, bool with_tokens, size_t header_len, size_t end,
                 const std::vector<StoredTensor>& stored, uint8_t* out) {
  Writer w(out);
  w.U32(kRecordMagic);
  w.U16(kRecordFormatVersion);
  w.U16(static_cast<uint16_t>((with_tokens ? kFlagHasTokens : 0) |
                              (r.partial ? kFlagPartial : 0)));
  w.U32(static_cast<uint32_t>(header_len));
  w.U32(static_cast<uint32_t>(r.layers.size()));
  w.U64(end);
  w.U64(0);  // checksum, filled in last
  w.Key(r.key);
  w.Key(r.parent);
  w.Key(r.namespace_id);
  w.U32(r.token_count);
  w.U32(0);
  if (with_tokens) {
    for (int32_t tok : r.tokens) w.U32(static_cast<uint32_t>(tok));
  }
  size_t next = 0;
  for (const LayerState& l : r.layers) {
    w.Str(l.cache_type);
    w.U16(static_cast<uint16_t>(l.meta.size()));
    for (const std::string& m : l.meta) w.Str(m);
    w.U8(l.placeholder ? kLayerPlaceholder : 0);
    w.U8(static_cast<uint8_t>(l.tensors.size()));
    for (size_t i = 0; i < l.tensors.size(); ++i) {
      const StoredTensor& st = stored[next++];
      w.U8(static_cast<uint8_t>(st.dtype));
      w.U8(static_cast<uint8_t>(st.shape.size()));
      w.U8(st.encoding);
      w.U8(0);
      for (int64_t d : st.shape) w.U64(static_cast<uint64_t>(d));
      w.U64(st.offset);
      w.U64(st.stored_len());
    }
  }
}

}  // namespace

StatusOr<SharedBytes> EncodeBlockRows(const BlockRecord& r,
                                      const std::vector<std::optional<TokenRows>>& rows,
                                      const EncodeOptions& opt) {
  const DecodeLimits limits;
  PKV_RETURN_IF_ERROR(CheckEncodable(r, limits));
  if (!rows.empty() && rows.size() != r.layers.size()) {
    return Status::InvalidArgument("token rows for " + std::to_string(rows.size()) +
                                   " layers of " + std::to_string(r.layers.size()));
  }
  const bool with_tokens = opt.store_tokens && !r.tokens.empty();
  std::vector<StoredTensor> stored;
  for (size_t i = 0; i < r.layers.size(); ++i) {
    for (const Tensor& t : r.layers[i].tensors) {
      PKV_ASSIGN_OR_RETURN(StoredTensor st,
                           Describe(t, rows.empty() ? std::nullopt : rows[i], limits));
      MaybeCompress(st, opt);
      stored.push_back(std::move(st));
    }
  }
  const size_t header_len = HeaderLength(r, with_tokens);
  size_t end = header_len;
  for (StoredTensor& st : stored) {
    st.offset = AlignUp(end);
    end = st.offset + st.stored_len();
  }
  uint8_t* out = nullptr;
  SharedBytes bytes;
  if (opt.memory != nullptr) {
    bytes =
        SharedBytes::AllocateIn(opt.memory, end, end, SharedBytes::kBufferAlign, &out);
  }
  if (out == nullptr) bytes = SharedBytes::Allocate(end, &out);
  WriteHeader(r, with_tokens, header_len, end, stored, out);
  // Zero the alignment padding, then copy tensors and hash the uncompressed bytes.
  HashStream state(HashStream::Width::k64);
  state.Update(out, kChecksumOffset);
  state.Update(out + kChecksumOffset + 8, header_len - kChecksumOffset - 8);
  size_t cursor = header_len;
  for (const StoredTensor& st : stored) {
    std::memset(out + cursor, 0, st.offset - cursor);
    for (size_t run = 0; run < st.runs; ++run) {
      const uint8_t* src = st.src + run * st.src_stride;
      if (st.encoding == kEncodingZstd) {
        state.Update(src, st.run_bytes);
      } else {
        CopyAndHash(out + st.offset + run * st.run_bytes, src, st.run_bytes, &state);
      }
    }
    if (st.encoding == kEncodingZstd) {
      std::memcpy(out + st.offset, st.compressed.data(), st.compressed.size());
    }
    cursor = st.offset + st.stored_len();
  }
  uint64_t checksum = state.Digest64();
  for (int i = 0; i < 8; ++i)
    out[kChecksumOffset + i] = static_cast<uint8_t>(checksum >> (8 * i));
  return bytes;
}

StatusOr<SharedBytes> EncodeBlock(const BlockRecord& r, const EncodeOptions& opt) {
  return EncodeBlockRows(r, {}, opt);
}

// ---- reading ---------------------------------------------------------------

namespace {

// Bounds-checked little-endian reader over the header. Every read that would
// run past `end_` sets the error and returns zeros.
class Reader {
 public:
  Reader(const uint8_t* data, size_t end, size_t pos) : d_(data), end_(end), pos_(pos) {}
  bool Has(size_t n) const { return ok_ && n <= end_ - pos_; }
  uint64_t Int(int bytes) {
    if (!Has(static_cast<size_t>(bytes))) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | d_[pos_ + i];
    pos_ += bytes;
    return v;
  }
  bool Str(uint32_t max_len, std::string* out) {
    uint64_t n = Int(2);
    if (n > max_len || !Has(n)) {
      ok_ = false;
      return false;
    }
    out->assign(reinterpret_cast<const char*>(d_ + pos_), n);
    pos_ += n;
    return true;
  }
  const uint8_t* Skip(size_t n) {
    if (!Has(n)) {
      ok_ = false;
      return nullptr;
    }
    const uint8_t* p = d_ + pos_;
    pos_ += n;
    return p;
  }
  bool ok() const { return ok_; }
  size_t pos() const { return pos_; }

 private:
  const uint8_t* d_;
  size_t end_;
  size_t pos_;
  bool ok_ = true;
};

uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct FixedHeader {
  uint16_t flags = 0;
  uint32_t header_len = 0;
  uint32_t layer_count = 0;
  uint64_t checksum = 0;
  RecordIdentity id;
};

Status ParseFixedHeader(const uint8_t* d, size_t size, const DecodeLimits& lim,
                        FixedHeader* h) {
  if (size < kRecordFixedHeaderBytes) {
    return Status::Corruption("record of " + std::to_string(size) +
                              " bytes is truncated");
  }
  if (size > lim.max_record_bytes) return Status::Corruption("record exceeds size limit");
  Reader r(d, size, 0);
  if (r.Int(4) != kRecordMagic) return Status::Corruption("bad magic");
  uint64_t version = r.Int(2);
  if (version != kRecordFormatVersion) {
    return Status::Corruption("unsupported format version " + std::to_string(version));
  }
  h->flags = static_cast<uint16_t>(r.Int(2));
  if (h->flags & ~kKnownFlags) return Status::Corruption("unknown flag bits");
  h->header_len = static_cast<uint32_t>(r.Int(4));
  h->layer_count = static_cast<uint32_t>(r.Int(4));
  uint64_t record_len = r.Int(8);
  h->checksum = r.Int(8);
  if (record_len != size) {
    return Status::Corruption("record length field " + std::to_string(record_len) +
                              " != buffer length " + std::to_string(size));
  }
  if (h->header_len < kRecordFixedHeaderBytes || h->header_len > size) {
    return Status::Corruption("header length out of range");
  }
  if (h->layer_count > lim.max_layers) return Status::Corruption("too many layers");
  h->id.key = BlockKey::DecodeFrom(d + 32);
  h->id.parent = BlockKey::DecodeFrom(d + 48);
  h->id.namespace_id = BlockKey::DecodeFrom(d + 64);
  h->id.token_count = static_cast<uint32_t>(LoadLE64(d + 80) & 0xFFFFFFFFu);
  if (LoadLE64(d + 80) >> 32) return Status::Corruption("reserved header bytes not zero");
  if (h->id.token_count > lim.max_tokens) return Status::Corruption("too many tokens");
  return Status::OK();
}

struct TensorDesc {
  DType dtype;
  std::vector<int64_t> shape;
  uint8_t encoding;
  uint64_t offset;
  uint64_t stored_len;
  uint64_t raw_len;
  size_t layer;  // index of the layer it belongs to
};

Status ParseTensorDesc(Reader& r, const DecodeLimits& lim, TensorDesc* t) {
  uint8_t dtype = static_cast<uint8_t>(r.Int(1));
  uint8_t ndim = static_cast<uint8_t>(r.Int(1));
  t->encoding = static_cast<uint8_t>(r.Int(1));
  uint8_t reserved = static_cast<uint8_t>(r.Int(1));
  if (!r.ok()) return Status::Corruption("truncated tensor descriptor");
  if (!IsValidDType(dtype))
    return Status::Corruption("unknown dtype " + std::to_string(dtype));
  if (ndim > lim.max_ndim) return Status::Corruption("too many dimensions");
  if (t->encoding > kEncodingZstd) return Status::Corruption("unknown tensor encoding");
  if (reserved != 0) return Status::Corruption("reserved descriptor byte not zero");
  t->dtype = static_cast<DType>(dtype);
  t->shape.resize(ndim);
  uint64_t elems = 1;
  for (auto& d : t->shape) {
    uint64_t v = r.Int(8);
    if (v > lim.max_tensor_bytes) return Status::Corruption("dimension out of range");
    if (v != 0 && elems > lim.max_tensor_bytes / v)
      return Status::Corruption("tensor too large");
    elems *= v;
    d = static_cast<int64_t>(v);
  }
  t->offset = r.Int(8);
  t->stored_len = r.Int(8);
  if (!r.ok()) return Status::Corruption("truncated tensor descriptor");
  if (elems > lim.max_tensor_bytes / DTypeSize(t->dtype)) {
    return Status::Corruption("tensor exceeds size limit");
  }
  t->raw_len = elems * DTypeSize(t->dtype);
  if (t->encoding == kEncodingRaw && t->stored_len != t->raw_len) {
    return Status::Corruption("raw tensor length does not match its shape");
  }
  return Status::OK();
}

// Parses everything before the tensor bytes into `out` (tensors left empty) and
// the descriptors into `descs`, checking the canonical layout.
Status ParseLayout(const SharedBytes& enc, const DecodeLimits& lim, const FixedHeader& h,
                   BlockRecord* out, std::vector<TensorDesc>* descs) {
  const uint8_t* d = enc.data();
  Reader r(d, h.header_len, kRecordFixedHeaderBytes);
  out->key = h.id.key;
  out->parent = h.id.parent;
  out->namespace_id = h.id.namespace_id;
  out->token_count = h.id.token_count;
  out->partial = (h.flags & kFlagPartial) != 0;
  if (h.flags & kFlagHasTokens) {
    if (h.id.token_count == 0) return Status::Corruption("token flag set with no tokens");
    const uint8_t* p = r.Skip(size_t{4} * h.id.token_count);
    if (p == nullptr) return Status::Corruption("truncated token ids");
    out->tokens.resize(h.id.token_count);
    std::memcpy(out->tokens.data(), p, size_t{4} * h.id.token_count);
  }
  out->layers.resize(h.layer_count);
  size_t expected_offset = h.header_len;
  for (LayerState& l : out->layers) {
    if (!r.Str(lim.max_string_bytes, &l.cache_type))
      return Status::Corruption("bad cache type");
    uint64_t meta_count = r.Int(2);
    if (meta_count > lim.max_meta_entries)
      return Status::Corruption("too many meta entries");
    l.meta.resize(meta_count);
    for (std::string& m : l.meta) {
      if (!r.Str(lim.max_string_bytes, &m)) return Status::Corruption("bad meta entry");
    }
    uint64_t flags = r.Int(1);
    uint64_t tensor_count = r.Int(1);
    if (!r.ok()) return Status::Corruption("truncated layer");
    if (flags & ~uint64_t{kLayerPlaceholder})
      return Status::Corruption("unknown layer flags");
    l.placeholder = (flags & kLayerPlaceholder) != 0;
    if (tensor_count > lim.max_tensors_per_layer)
      return Status::Corruption("too many tensors");
    if (l.placeholder && tensor_count != 0) {
      return Status::Corruption("placeholder layer with tensors");
    }
    for (uint64_t i = 0; i < tensor_count; ++i) {
      TensorDesc t;
      t.layer = static_cast<size_t>(&l - out->layers.data());
      PKV_RETURN_IF_ERROR(ParseTensorDesc(r, lim, &t));
      if (t.offset != AlignUp(expected_offset) || t.offset > enc.size() ||
          t.stored_len > enc.size() - t.offset) {
        return Status::Corruption("tensor bytes out of place");
      }
      expected_offset = t.offset + t.stored_len;
      descs->push_back(std::move(t));
    }
  }
  if (r.pos() != h.header_len) return Status::Corruption("header length mismatch");
  if (expected_offset != enc.size())
    return Status::Corruption("trailing bytes after tensors");
  return Status::OK();
}

bool PaddingIsZero(const uint8_t* d, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) {
    if (d[i] != 0) return false;
  }
  return true;
}

// Materialises tensor `t` (a view for raw, a decompressed copy for zstd) and
// feeds its uncompressed bytes to the checksum (`state` null: no checksum).
StatusOr<Tensor> LoadTensor(const SharedBytes& enc, const TensorDesc& t,
                            HashStream* state) {
  if (t.encoding == kEncodingRaw) {
    SharedBytes view = enc.Slice(t.offset, t.stored_len);
    if (state != nullptr) state->Update(view.data(), view.size());
    return Tensor(t.dtype, t.shape, std::move(view));
  }
  const uint8_t* src = enc.data() + t.offset;
  unsigned long long content = ZSTD_getFrameContentSize(src, t.stored_len);
  if (content != t.raw_len)
    return Status::Corruption("zstd frame size does not match shape");
  uint8_t* out = nullptr;
  SharedBytes raw = SharedBytes::Allocate(t.raw_len, &out);
  size_t n = ZSTD_decompress(out, t.raw_len, src, t.stored_len);
  if (ZSTD_isError(n) || n != t.raw_len) return Status::Corruption("bad zstd frame");
  if (state != nullptr) state->Update(out, n);
  return Tensor(t.dtype, t.shape, std::move(raw));
}

}  // namespace

// Decodes the whole record; when `out` is null only verifies it. `verify`
// false skips the checksum (DecodeTrustedBlock); every other check stays.
static Status DecodeInto(const SharedBytes& enc, const DecodeLimits& lim,
                         BlockRecord* out, bool verify = true) {
  FixedHeader h;
  PKV_RETURN_IF_ERROR(ParseFixedHeader(enc.data(), enc.size(), lim, &h));
  BlockRecord rec;
  std::vector<TensorDesc> descs;
  PKV_RETURN_IF_ERROR(ParseLayout(enc, lim, h, &rec, &descs));
  HashStream state(HashStream::Width::k64);
  if (verify) {
    state.Update(enc.data(), kChecksumOffset);
    state.Update(enc.data() + kChecksumOffset + 8, h.header_len - kChecksumOffset - 8);
  }
  size_t cursor = h.header_len;
  for (const TensorDesc& t : descs) {
    if (!PaddingIsZero(enc.data(), cursor, t.offset)) {
      return Status::Corruption("non-zero alignment padding");
    }
    PKV_ASSIGN_OR_RETURN(Tensor tensor, LoadTensor(enc, t, verify ? &state : nullptr));
    rec.layers[t.layer].tensors.push_back(std::move(tensor));
    cursor = t.offset + t.stored_len;
  }
  if (verify && state.Digest64() != h.checksum) {
    return Status::Corruption("checksum mismatch");
  }
  if (out != nullptr) *out = std::move(rec);
  return Status::OK();
}

StatusOr<BlockRecord> DecodeBlock(const SharedBytes& enc, const DecodeLimits& lim) {
  BlockRecord rec;
  PKV_RETURN_IF_ERROR(DecodeInto(enc, lim, &rec));
  return rec;
}

StatusOr<BlockRecord> DecodeTrustedBlock(const SharedBytes& enc,
                                         const DecodeLimits& lim) {
  BlockRecord rec;
  PKV_RETURN_IF_ERROR(DecodeInto(enc, lim, &rec, /*verify=*/false));
  return rec;
}

Status VerifyBlock(const SharedBytes& enc, const DecodeLimits& lim) {
  return DecodeInto(enc, lim, nullptr);
}

StatusOr<RecordIdentity> PeekBlockIdentity(std::string_view enc) {
  FixedHeader h;
  PKV_RETURN_IF_ERROR(ParseFixedHeader(reinterpret_cast<const uint8_t*>(enc.data()),
                                       enc.size(), DecodeLimits{}, &h));
  return h.id;
}

}  // namespace prefixkv
