// What the host benchmarks share: a host (tunehost::host::Server with the
// random tuner) on loopback in a thread of its own, with or without a fresh
// SQLite store.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "tunehost/host/plugin.h"
#include "tunehost/host/server.h"
#include "tunehost/host/store.h"
#include "tunehost/protocol/codec.h"

namespace tunehost::bench {

namespace p = tunehost::protocol;
namespace th = tunehost::host;
using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
inline const char* Verdict(bool met) { return met ? "met" : "NOT MET"; }

// A fresh store file in the temporary directory, removed at exit.
class TempStore {
 public:
  TempStore() {
    dir_ = std::filesystem::temp_directory_path() /
           ("tunehost-bench-" + std::to_string(getpid()) + "-" + std::to_string(++count_));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    tunehost::Status st = th::Store::Open(dir_ / "store.db", th::Store::Mode::kCreate, &store_);
    if (!st.ok()) throw std::runtime_error(st.ToString());
  }
  ~TempStore() {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  th::Store* get() { return store_.get(); }

 private:
  static inline int count_ = 0;
  std::filesystem::path dir_;
  std::unique_ptr<th::Store> store_;
};

struct HostUnderTest {
  th::PluginRegistry registry;
  std::unique_ptr<TempStore> store;
  std::unique_ptr<th::Server> server;
  std::thread loop;

  // The default heartbeat and ack timeout keep liveness out of the figures;
  // the fleet benchmark gives the real ones.
  HostUnderTest(const std::string& plugins, uint64_t max_trials, bool with_store,
                uint32_t concurrency = 1,
                std::chrono::milliseconds heartbeat = std::chrono::milliseconds(60000),
                std::chrono::milliseconds ack_timeout = std::chrono::milliseconds(60000),
                uint32_t prefetch = 0) {
    registry.LoadDirectory(plugins);
    th::ServerOptions o;
    o.prefetch = prefetch;
    o.endpoints = {"tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
                   "tcp://127.0.0.1:*"};
    o.heartbeat_interval = heartbeat;
    o.ack_timeout = ack_timeout;
    server = std::make_unique<th::Server>(o, &registry);
    if (!server->Bind().ok()) throw std::runtime_error("bind failed");
    if (with_store) {
      store = std::make_unique<TempStore>();
      server->UseStore(store->get());
    }
    p::ExperimentSpec spec;
    spec.id = "bench";
    spec.tuner.name = "random";
    (void)p::JsonToPacked("{\"seed\": 1}", &spec.tuner.args);
    spec.concurrency = concurrency;
    spec.max_trials = max_trials;
    p::Packed space;
    (void)p::JsonToPacked(R"({"x": {"_type": "uniform", "_value": [0, 1]}})", &space);
    tunehost::Status st = server->Configure(spec, space);
    if (!st.ok()) throw std::runtime_error(st.ToString());
    loop = std::thread([this] { (void)server->Run(); });
  }
  ~HostUnderTest() { Stop(); }
  void Stop() {
    server->Stop();
    if (loop.joinable()) loop.join();
  }
};

}  // namespace tunehost::bench
