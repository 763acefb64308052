#include "arrival_step.hpp"

#include <algorithm>
#include <cstdio>
#include <random>
#include <string_view>

#include "ddp/common/error.hpp"
#include "ddp/store/etcd_store.hpp"
#include "keys.hpp"

namespace ddp::rdzv::detail {

namespace {

// This node's R/joining/ marker under its lease, appended to `ops` (nothing
// without a lease): written in the same request as the arrival it marks.
void mark_joining(std::vector<store::BatchOp>& ops, const std::string& prefix, const NodeSpec& self,
                  store::LeaseId lease) {
  if (lease != 0)
    ops.push_back(store::BatchOp::set(store::keys::joining_key(prefix, self.node_id), "", lease));
}

class CounterArrivals final : public ArrivalStep {
 public:
  explicit CounterArrivals(std::shared_ptr<store::Store> store) : store_(std::move(store)) {}

  std::int64_t arrive(const std::string& prefix, const NodeSpec& self, store::LeaseId lease,
                      std::vector<store::BatchOp> before) override {
    // The marker goes before the count: an arrival counted is an arrival marked.
    mark_joining(before, prefix, self, lease);
    if (before.empty()) return store_->add(prefix + "seq", pack_join(self.local_world_size));
    before.push_back(store::BatchOp::add(prefix + "seq", pack_join(self.local_world_size)));
    store_->batch(before);
    store::rethrow_first_error(before);
    return before.back().number;
  }
  std::int64_t arrived(const std::string& prefix) override {
    auto seq = store_->try_get(prefix + "seq");
    return store::keys::counter_value(seq);
  }

 private:
  std::shared_ptr<store::Store> store_;
};

// Keys P/arrive/<nproc>/<node_id>.<nonce>. Arrival order is etcd's create
// revision order: every create is its own revision, and arrival keys are never
// deleted while the round is open, so the number of arrival keys as of my
// create is an exact, gap-free 1-based index. The create and the counts are
// one txn (its ranges see its put): one request per joiner. The nonce keeps a
// node that joins the same round twice (after a lost lease) from finding its
// old key.
//
// Workers: with nproc in the path, one txn counts all arrivals and those with
// this node's nproc at that revision. Equal counts (the usual homogeneous job)
// mean workers = count * nproc: still one request. Otherwise the keys up to
// that revision are listed and their nproc summed: two requests, the second
// one O(arrivals) in size, paid only by jobs mixing nproc values (or when etcd
// compacted the revision away).
class EtcdArrivals final : public ArrivalStep {
 public:
  EtcdArrivals(std::shared_ptr<store::EtcdStore> etcd, int nproc) : etcd_(std::move(etcd)), nproc_(nproc) {}

  std::int64_t arrive(const std::string& prefix, const NodeSpec& self, store::LeaseId lease,
                      std::vector<store::BatchOp> before) override {
    if (!before.empty()) {
      etcd_->batch(before);  // one request each: the arrival is a txn of its own
      store::rethrow_first_error(before);
    }
    const std::string all = prefix + "arrive/";
    const int nproc = self.local_world_size;
    const std::string key = all + std::to_string(nproc) + "/" + self.node_id + "." + nonce();
    store::EtcdStore::Counts c;
    try {
      // The arrival key has no lease (the counts need every arrival kept); the
      // marker, in the same txn, has this node's.
      std::vector<store::BatchOp> marker;
      mark_joining(marker, prefix, self, lease);
      c = etcd_->create(key, self.node_id, 0, {all, all + std::to_string(nproc) + "/"}, marker);
    } catch (const store::CompactedError&) {
      // Only a retried create counts at a past revision, which etcd may have
      // compacted away: the key exists, so list by create revision instead.
      return listed(all, create_revision_of(key));
    }
    return packed(all, nproc, c);
  }

  std::int64_t arrived(const std::string& prefix) override {
    const std::string all = prefix + "arrive/";
    return packed(all, nproc_, etcd_->count_at({all, all + std::to_string(nproc_) + "/"}, 0));
  }

 private:
  // Equal counts: every arrival up to c.revision runs `nproc` workers.
  std::int64_t packed(const std::string& all, int nproc, const store::EtcdStore::Counts& c) {
    const std::int64_t count = c.counts.at(0);
    if (c.counts.at(1) == count) return (count << kPackShift) | (count * nproc);
    return listed(all, c.revision);
  }

  // Arrivals created at or before `upto`, workers summed from their key paths.
  std::int64_t listed(const std::string& all, store::Revision upto) {
    const auto keys = etcd_->keys_created(all, upto);
    std::int64_t workers = 0;
    for (const auto& k : keys) {
      const auto rest = std::string_view(k).substr(std::min(all.size(), k.size()));
      const auto n = store::keys::index_or_none(rest.substr(0, rest.find('/')));
      if (n < 0) throw InternalError("malformed rendezvous arrival key '" + k + "' in etcd");
      workers += n;
    }
    return (static_cast<std::int64_t>(keys.size()) << kPackShift) | workers;
  }

  store::Revision create_revision_of(const std::string& key) {
    // create() of an existing key without counts only reads its create revision.
    return etcd_->create(key, "", 0, {}).revision;
  }

  static std::string nonce() {
    thread_local std::mt19937_64 gen{std::random_device{}()};
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(gen()));
    return buf;
  }

  std::shared_ptr<store::EtcdStore> etcd_;
  int nproc_;
};

}  // namespace

std::unique_ptr<ArrivalStep> counter_arrivals(std::shared_ptr<store::Store> store) {
  return std::make_unique<CounterArrivals>(std::move(store));
}

std::unique_ptr<ArrivalStep> etcd_arrivals(std::shared_ptr<store::EtcdStore> etcd, int local_world_size) {
  return std::make_unique<EtcdArrivals>(std::move(etcd), local_world_size);
}

}  // namespace ddp::rdzv::detail
