// The fixture of the core's tests: a Core on a MemoryStore and a FakeClock,
// with helpers to add users, nodes and specs.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/types.h"
#include "common/clock.h"
#include "server/core.h"
#include "store/store.h"

namespace tide::server {

inline api::JobSpec Spec(int gpus = 1, std::vector<std::string> types = {}) {
  api::JobSpec s;
  s.name = "t";
  s.command = {"true"};
  s.resources.gpu_count = gpus;
  s.resources.gpu_types = std::move(types);
  return s;
}

inline api::RegisterRequest Machine(const std::string& name, int gpus, const std::string& model = "RTX4090") {
  api::RegisterRequest r;
  r.name = name;
  for (int i = 0; i < gpus; ++i) {
    api::Gpu g;
    g.index = i;
    g.name = model;
    g.model = model;
    g.memory_mb = 24576;
    r.gpus.push_back(g);
  }
  return r;
}

class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::NewMemoryStore();
    Boot();
  }
  void Boot() {
    CoreOptions options = options_;
    options.node_timeout_ms = 10'000;
    options.report_grace_ms = 10'000;
    options.tick_ms = 20;
    core_ = std::make_unique<Core>(store_.get(), &clock_, options);
    if (blob_deleter_) core_->set_blob_deleter(blob_deleter_);
    ASSERT_TRUE(core_->Recover().ok());
    core_->Start();
  }
  void Reboot() {
    core_->Stop();
    core_.reset();
    Boot();
  }
  Caller User(const std::string& name) {
    auto u = core_->CreateUser(AdminCaller(), name);
    EXPECT_TRUE(u.ok()) << u.status().ToString();
    return Caller{Scope::kUser, u->first.id};
  }
  std::string AddNode(const std::string& name, int gpus, const std::string& address = "") {
    api::RegisterRequest req = Machine(name, gpus);
    req.address = address;
    return AddNode(req);
  }
  // Joins with a join token issued for `provider` (a user id, "" = none).
  std::string AddNode(const api::RegisterRequest& req, const std::string& provider = "") {
    auto join = core_->CreateJoinToken(AdminCaller(), provider);
    auto caller = core_->Authenticate(*join);
    EXPECT_TRUE(caller.ok());
    auto reg = core_->RegisterNode(*caller, req);
    EXPECT_TRUE(reg.ok()) << reg.status().ToString();
    return reg->first;
  }
  // The core ticks on its own thread; wait (real time) for a condition.
  template <typename F>
  bool Eventually(F f) {
    for (int i = 0; i < 200; ++i) {
      if (f()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  FakeClock clock_;
  // What the next Boot() uses beyond the fixture's timings.
  CoreOptions options_;
  std::function<void(const std::vector<DeletedBlobs>&)> blob_deleter_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Core> core_;
};

}  // namespace tide::server
