#include "audit/write_coalescer.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>

namespace acqfs::audit {

void AddRange(std::vector<std::pair<uint64_t, uint64_t>>* ranges,
              uint64_t offset, uint64_t size) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  const uint64_t end = offset > kMax - size ? kMax : offset + size;
  if (end <= offset) return;
  auto& v = *ranges;
  // Appends, the common case, touch only the last range.
  if (v.empty() || v.back().second < offset) {
    v.emplace_back(offset, end);
    return;
  }
  if (v.back().first <= offset) {
    v.back().second = std::max(v.back().second, end);
    return;
  }
  // The first range that ends at or after `offset` (touching it counts).
  auto lo = std::lower_bound(v.begin(), v.end(), offset,
                             [](const std::pair<uint64_t, uint64_t>& r,
                                uint64_t off) { return r.second < off; });
  if (lo == v.end() || lo->first > end) {
    v.insert(lo, {offset, end});
    return;
  }
  uint64_t merged_end = end;
  auto hi = lo;
  while (hi != v.end() && hi->first <= end) {
    merged_end = std::max(merged_end, hi->second);
    ++hi;
  }
  lo->first = std::min(lo->first, offset);
  lo->second = merged_end;
  v.erase(std::next(lo), hi);
}

WriteCoalescer::WriteCoalescer(size_t max_ranges, size_t max_files)
    : max_ranges_(std::max<size_t>(max_ranges, 1)),
      max_files_(std::max<size_t>(max_files, 1)) {}

std::unordered_map<uint64_t, WriteCoalescer::Pending>::iterator
WriteCoalescer::Start(uint64_t node, const Record& first,
                      std::vector<Record>* out) {
  auto it = pending_.find(node);
  if (it != pending_.end()) return it;
  if (pending_.size() >= max_files_ && !order_.empty())
    out->push_back(Remove(pending_.find(order_.front())));
  Pending p;
  p.record = first;
  p.record.op = Op::kWrite;
  p.record.ranges.clear();
  p.record.size = 0;
  p.record.ranges_known = true;
  order_.push_back(node);
  p.age = std::prev(order_.end());
  try {
    return pending_.emplace(node, std::move(p)).first;
  } catch (...) {
    order_.pop_back();
    throw;
  }
}

Record WriteCoalescer::Remove(
    std::unordered_map<uint64_t, Pending>::iterator it) {
  Record r = std::move(it->second.record);
  order_.erase(it->second.age);
  pending_.erase(it);
  return r;
}

void WriteCoalescer::AddTo(std::unordered_map<uint64_t, Pending>::iterator it,
                           uint64_t offset, uint64_t size,
                           std::vector<Record>* out) {
  Record& r = it->second.record;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  r.size = r.size > kMax - size ? kMax : r.size + size;
  AddRange(&r.ranges, offset, size);
  if (r.ranges.size() >= max_ranges_) out->push_back(Remove(it));
}

std::vector<Record> WriteCoalescer::Add(uint64_t node, uint64_t offset,
                                        uint64_t size, const Record& first) {
  std::vector<Record> out;
  std::lock_guard<std::mutex> lock(mu_);
  AddTo(Start(node, first, &out), offset, size, &out);
  return out;
}

bool WriteCoalescer::AddIfPending(uint64_t node, uint64_t offset, uint64_t size,
                                  std::vector<Record>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(node);
  if (it == pending_.end()) return false;
  AddTo(it, offset, size, out);
  return true;
}

bool WriteCoalescer::Has(uint64_t node) const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.count(node) != 0;
}

std::vector<Record> WriteCoalescer::AddUnseen(uint64_t node,
                                              const Record& first) {
  std::vector<Record> out;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = Start(node, first, &out);
  it->second.record.ranges_known = false;
  return out;
}

std::optional<Record> WriteCoalescer::Take(uint64_t node) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(node);
  if (it == pending_.end()) return std::nullopt;
  return Remove(it);
}

std::vector<Record> WriteCoalescer::TakeOlderThan(int64_t before_ns) {
  std::vector<Record> out;
  std::lock_guard<std::mutex> lock(mu_);
  // Every record is looked at: the realtime clock may have gone back, so
  // order_ need not be in time order.
  for (auto node = order_.begin(); node != order_.end();) {
    auto it = pending_.find(*node);
    ++node;  // Remove erases the current one
    if (it->second.record.time_ns < before_ns) out.push_back(Remove(it));
  }
  return out;
}

std::vector<Record> WriteCoalescer::TakeAll() {
  std::vector<Record> out;
  std::lock_guard<std::mutex> lock(mu_);
  out.reserve(order_.size());
  for (uint64_t node : order_) out.push_back(std::move(pending_[node].record));
  pending_.clear();
  order_.clear();
  return out;
}

size_t WriteCoalescer::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

}  // namespace acqfs::audit
