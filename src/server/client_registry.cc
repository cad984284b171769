// The registry of open clients (CLIENT LIST).
#include "client_registry.h"

namespace prefixkv::server {

std::shared_ptr<ClientRecord> ClientRegistry::Add(std::string addr, std::string laddr,
                                                  uint64_t now_ms) {
  auto* record = new ClientRecord;
  record->addr = std::move(addr);
  record->laddr = std::move(laddr);
  record->created_ms = now_ms;
  record->last_command_ms.store(now_ms, std::memory_order_relaxed);
  {
    MutexLock lock(&mu_);
    record->id = next_id_++;
    clients_[record->id] = record;
  }
  // The deleter keeps the registry alive until the last record is gone.
  return std::shared_ptr<ClientRecord>(record,
                                       [self = shared_from_this()](ClientRecord* r) {
                                         self->Remove(r->id);
                                         delete r;
                                       });
}

void ClientRegistry::Remove(uint64_t id) {
  MutexLock lock(&mu_);
  clients_.erase(id);
}

std::vector<std::shared_ptr<const ClientRecord>> ClientRegistry::Snapshot() const {
  // A listed record may be freed once mu_ is released (its connection
  // closes), so the snapshot copies the records under the lock.
  std::vector<std::shared_ptr<const ClientRecord>> out;
  MutexLock lock(&mu_);
  out.reserve(clients_.size());
  for (const auto& [id, record] : clients_) {
    auto copy = std::make_shared<ClientRecord>();
    copy->id = record->id;
    copy->addr = record->addr;
    copy->laddr = record->laddr;
    copy->created_ms = record->created_ms;
    copy->last_command_ms.store(record->last_command_ms.load(std::memory_order_relaxed));
    copy->last_command.store(record->last_command.load(std::memory_order_relaxed));
    copy->multi.store(record->multi.load(std::memory_order_relaxed));
    copy->admin.store(record->admin.load(std::memory_order_relaxed));
    copy->set_name(record->name());
    out.push_back(std::move(copy));
  }
  return out;
}

bool ValidClientName(std::string_view name) {
  for (char c : name) {
    if (c < '!' || c > '~') return false;
  }
  return true;
}

}  // namespace prefixkv::server
