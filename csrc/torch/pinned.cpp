// pinned.cpp — "pinned" host memory for "tpu": what Tensor.pin_memory(),
// is_pinned() and DataLoader(pin_memory=True) use through the PrivateUse1
// hooks (getPinnedMemoryAllocator, isPinnedPtr) and at::getHostAllocator.
//
// PJRT copies from ordinary host memory (tpuc uploads with
// kImmutableOnlyDuringCall: the plugin has read the data when the call
// returns), so a pinned block needs no registration with the device: it is
// page-aligned host memory that tpuc tracks, so that is_pinned() can answer
// for any pointer inside a block (a view of a pinned tensor) and the
// statistics are exact. Every block is freed when its last tensor dies; no
// block is cached. Thread-safe (DataLoader pins on its own thread).
#include "tpuc_torch.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unistd.h>

namespace tpuc_torch {
namespace {

struct PinnedBlocks {
  std::mutex mu;
  std::map<uintptr_t, size_t> blocks;  // start -> size
  int64_t bytes = 0, peak = 0, count = 0, peak_count = 0, allocs = 0, frees = 0;
};

PinnedBlocks& blocks() {
  static PinnedBlocks* b = new PinnedBlocks();  // leaked: deleters may run at exit
  return *b;
}

size_t page_size() {
  static const size_t p = [] {
    long v = sysconf(_SC_PAGESIZE);
    return v > 0 ? static_cast<size_t>(v) : size_t{4096};
  }();
  return p;
}

void free_pinned(void* p) {
  if (!p) return;
  auto& b = blocks();
  {
    std::lock_guard<std::mutex> lock(b.mu);
    auto it = b.blocks.find(reinterpret_cast<uintptr_t>(p));
    if (it != b.blocks.end()) {
      b.bytes -= static_cast<int64_t>(it->second);
      b.count--;
      b.frees++;
      b.blocks.erase(it);
    }
  }
  std::free(p);
}

struct PinnedAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    // a zero-byte request still gets a block: every pinned tensor has a pointer is_pinned() knows
    size_t size = n ? n : 1;
    int rc = posix_memalign(&p, page_size(), size);
    TORCH_CHECK_WITH(OutOfMemoryError, rc == 0 && p, "tpuc: out of host memory pinning ", n,
                     " bytes");
    auto& b = blocks();
    {
      std::lock_guard<std::mutex> lock(b.mu);
      b.blocks.emplace(reinterpret_cast<uintptr_t>(p), size);
      b.bytes += static_cast<int64_t>(size);
      b.count++;
      b.allocs++;
      if (b.bytes > b.peak) b.peak = b.bytes;
      if (b.count > b.peak_count) b.peak_count = b.count;
    }
    return c10::DataPtr(p, p, &free_pinned, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dest, src, count);
  }
  // Uploads finish reading host memory before they return: no stream to wait for.
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}  // nothing cached
  at::HostStats get_stats() override {
    at::HostStats s;
    auto& b = blocks();
    std::lock_guard<std::mutex> lock(b.mu);
    for (auto* st : {&s.active_bytes, &s.allocated_bytes}) {
      st->current = b.bytes;
      st->peak = b.peak;
      st->allocated = b.allocs;
      st->freed = b.frees;
    }
    for (auto* st : {&s.active_requests, &s.allocations}) {
      st->current = b.count;
      st->peak = b.peak_count;
      st->allocated = b.allocs;
      st->freed = b.frees;
    }
    s.num_host_alloc = b.allocs;
    s.num_host_free = b.frees;
    return s;
  }
  void reset_accumulated_stats() override {
    auto& b = blocks();
    std::lock_guard<std::mutex> lock(b.mu);
    b.allocs = b.frees = 0;
  }
  void reset_peak_stats() override {
    auto& b = blocks();
    std::lock_guard<std::mutex> lock(b.mu);
    b.peak = b.bytes;
    b.peak_count = b.count;
  }
};

PinnedAllocator g_pinned;

}  // namespace

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_pinned)

c10::Allocator* pinned_allocator() { return &g_pinned; }

bool is_pinned_ptr(const void* p) {
  auto& b = blocks();
  auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(b.mu);
  auto it = b.blocks.upper_bound(a);
  if (it == b.blocks.begin()) return false;
  --it;
  return a >= it->first && a < it->first + it->second;
}

}  // namespace tpuc_torch
