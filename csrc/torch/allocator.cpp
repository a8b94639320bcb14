// allocator.cpp — the PrivateUse1 allocator. A DataPtr's data and context are
// a tpuc_storage* (never device memory, never dereferenced here); the
// deleter destroys the storage. Every live storage is registered so that
// getDeviceFromPtr can answer for any pointer.
#include "tpuc_torch.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace tpuc_torch {
namespace {

// The live storages: an open-addressing set of pointers (linear probing,
// deletion by backward shift, no tombstones). Each op allocates and frees a
// storage; std::unordered_set allocated and freed a node for each and hashed
// through its buckets (about 0.3k instructions per op, docs/execution.md).
class PtrSet {
 public:
  void insert(const void* p) {
    if (2 * (n_ + 1) > slots_.size()) rehash(slots_.empty() ? 1024 : 2 * slots_.size());
    size_t i = home(p);
    while (slots_[i] && slots_[i] != p) i = (i + 1) & mask_;
    if (!slots_[i]) ++n_;
    slots_[i] = p;
  }
  void erase(const void* p) {
    if (slots_.empty()) return;
    size_t i = home(p);
    while (slots_[i] != p) {
      if (!slots_[i]) return;  // absent
      i = (i + 1) & mask_;
    }
    // backward shift: move later entries of the probe run into the hole
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; slots_[j]; j = (j + 1) & mask_) {
      size_t h = home(slots_[j]);
      // the entry at j may fill the hole when its home is not in (hole, j]
      if (((j - h) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = nullptr;
    --n_;
  }
  bool contains(const void* p) const {
    if (slots_.empty() || !p) return false;
    for (size_t i = home(p); slots_[i]; i = (i + 1) & mask_)
      if (slots_[i] == p) return true;
    return false;
  }

 private:
  size_t home(const void* p) const {
    uint64_t x = reinterpret_cast<uintptr_t>(p);
    return static_cast<size_t>((x * 0x9e3779b97f4a7c15ull) >> 20) & mask_;
  }
  void rehash(size_t cap) {
    std::vector<const void*> old(cap, nullptr);
    old.swap(slots_);
    mask_ = cap - 1;
    n_ = 0;
    for (const void* p : old)
      if (p) insert(p);
  }
  std::vector<const void*> slots_;  // a power of two in size, at most half full
  size_t mask_ = 0;
  size_t n_ = 0;
};

struct Registry {
  std::mutex mu;
  PtrSet live;
};

Registry& registry() {
  static Registry* r = new Registry();  // leaked: deleters may run at exit
  return *r;
}

void delete_storage(void* p) {
  auto* s = static_cast<tpuc_storage*>(p);
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.erase(s);
  }
  tpuc_storage_destroy(s);
}

c10::DataPtr make_storage(size_t nbytes, c10::DeviceIndex index) {
  tpuc_runtime* rt = runtime();
  check_device(index);
  tpuc_storage* s = nullptr;
  check(tpuc_storage_create(rt, index, nbytes, &s), "allocating a storage");
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.insert(s);
  }
  return c10::DataPtr(s, s, &delete_storage, c10::Device(kTpu, index));
}

struct TpuAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override { return make_storage(nbytes, current_device()); }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_storage; }

  // Used by Allocator::clone (storage.clone()): device to device, whole storage.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    auto* d = static_cast<tpuc_storage*>(dest);
    auto* s = static_cast<tpuc_storage*>(const_cast<void*>(src));
    TORCH_CHECK(count == tpuc_storage_nbytes(d) && count == tpuc_storage_nbytes(s),
                "tpuc: copy_data of ", count, " bytes between storages of ",
                tpuc_storage_nbytes(s), " and ", tpuc_storage_nbytes(d), " bytes");
    if (count == 0) return;
    tpuc_buffer* b = tpuc_storage_get_buffer(s);
    if (b && tpuc_buffer_device(b) == tpuc_storage_device(d)) {
      tpuc_status* st = tpuc_storage_set_buffer(d, b);  // buffers are immutable: share
      tpuc_buffer_release(b);
      check(st, "copying a storage");
      return;
    }
    if (b) tpuc_buffer_release(b);
    std::vector<unsigned char> host(count);
    check(tpuc_storage_download(s, host.data(), count), "copying a storage");
    int64_t dims[1] = {static_cast<int64_t>(count)};
    check(tpuc_storage_upload(d, TPUC_U8, dims, 1, host.data()), "copying a storage");
  }

  bool initialized() override { return runtime_started(); }
  void emptyCache(c10::MempoolId_t) override {}  // nothing is cached: buffers die with storages
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // one in-order stream

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats stats;
    tpuc_memory_stats m{};
    check(tpuc_memory_stats_get(runtime(), device, &m), "memory statistics");
    for (auto* arr : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes}) {
      auto& all = (*arr)[0];
      all.current = m.bytes_in_use;
      all.peak = m.peak_bytes_in_use;
    }
    stats.allocation[0].current = m.num_buffers;
    stats.allocation[0].allocated = m.num_allocs;
    stats.allocation[0].peak = m.num_buffers;
    stats.num_device_alloc = m.num_allocs;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex device) override {
    check(tpuc_memory_reset_peak(runtime(), device), "resetting peak memory statistics");
  }
};

TpuAllocator g_allocator;

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator)

c10::Allocator* allocator() { return &g_allocator; }

tpuc_storage* storage_of(const c10::Storage& s) {
  auto* p = static_cast<tpuc_storage*>(const_cast<void*>(s.data()));
  TORCH_CHECK(p, "tpuc: a tpu tensor without a storage");
  return p;
}

void resize_storage(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  if (storage.nbytes() == nbytes) return;
  check(tpuc_storage_resize(storage_of(storage), nbytes), "resizing a storage");
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

std::optional<c10::DeviceIndex> device_of_storage_ptr(const void* p) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.live.contains(p)) return std::nullopt;
  return static_cast<c10::DeviceIndex>(tpuc_storage_device(static_cast<const tpuc_storage*>(p)));
}

void synchronize(int device) {
  if (!runtime_started()) return;  // nothing ever ran
  // Ops recorded in fused mode run, then every program launched so far is
  // waited for, including those whose results were already freed.
  check(tpuc_synchronize(runtime(), device), "synchronize");
}

}  // namespace tpuc_torch
