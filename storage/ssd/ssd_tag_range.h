// TagRange: the metadata records of one tag (ssd_layout.h) in key order,
// shared by the audit and the namespace records (manifests, removals).
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>

#include <memory>
#include <string>
#include <string_view>

#include "ssd_tier_impl.h"

namespace prefixkv::ssd {

// The records of one tag (ssd_layout.h) in key order; the iterator's upper bound keeps it
// from reading the next tag's. Not copyable: the iterator points at upper_.
class TagRange {
 public:
  TagRange(rocksdb::DB* db, char tag)
      : begin_(1, tag), end_(1, static_cast<char>(tag + 1)), upper_(end_) {
    rocksdb::ReadOptions ro;
    ro.iterate_upper_bound = &upper_;
    it_.reset(db->NewIterator(ro));
    it_->Seek(begin_);
  }
  TagRange(const TagRange&) = delete;
  TagRange& operator=(const TagRange&) = delete;

  bool Valid() const { return it_->Valid() && it_->key().starts_with(begin_); }
  void Next() { it_->Next(); }
  std::string_view key() const { return it_->key().ToStringView(); }
  std::string_view value() const { return it_->value().ToStringView(); }
  Status status(std::string_view context) const {
    return FromRocks(it_->status(), context);
  }

 private:
  const std::string begin_;
  const std::string end_;
  const rocksdb::Slice upper_;
  std::unique_ptr<rocksdb::Iterator> it_;
};

}  // namespace prefixkv::ssd
