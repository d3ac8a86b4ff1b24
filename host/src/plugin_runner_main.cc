// tunehost-plugin-runner: runs one tuner or assessor instance for a host in a
// process of its own (`isolation: process`, wire-format.md §4.3), so that a
// plugin that crashes, aborts, exits or eats memory takes only this process
// down. It loads the plugin file with the host's own loader (every ABI and
// descriptor check applies) and serves the host's calls, one at a time, over
// the channel of runner_channel.h; the frames are in runner_frames.h.
//
// Started by the host only:
//   tunehost-plugin-runner --fd N --file PLUGIN.so --kind tuner|assessor --parent PID
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "runner_channel.h"
#include "runner_frames.h"
#include "tunehost/host/plugin.h"

namespace tunehost::host {
namespace {

namespace rf = runner_frames;

// Log lines go to the host as frames, so they land in the host's log.
class ChannelSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ChannelSink(FrameChannel* channel) : channel_(channel) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    msgpack::sbuffer b;
    rf::Packer pk(b);
    pk.pack_array(3);
    rf::Str(pk, "log");
    pk.pack(static_cast<int>(msg.level));
    rf::Str(pk, std::string_view(msg.payload.data(), msg.payload.size()));
    (void)channel_->Send(std::string(b.data(), b.size()));
  }
  void flush_() override {}

 private:
  FrameChannel* channel_;
};

class Runner {
 public:
  Runner(FrameChannel* channel, std::string file, std::string kind)
      : channel_(channel), file_(std::move(file)), kind_(std::move(kind)) {}

  int Run() {
    load_status_ = registry_.LoadFile(file_);
    std::thread reader([this] { ReadLoop(); });
    reader.detach();  // ends the process on EOF
    for (;;) {
      std::string frame;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !calls_.empty(); });
        frame = std::move(calls_.front());
        calls_.pop_front();
      }
      if (!Serve(frame)) return 0;
    }
  }

 private:
  // Host frames: calls are queued for the main thread; answers to
  // send_trial go to the waiting plugin thread. The host gone: exit.
  void ReadLoop() {
    for (;;) {
      std::string frame;
      if (!channel_->Receive(&frame).ok()) _exit(0);
      rf::Reader r(frame);
      std::string type;
      if (!r.ok() || !r.String(0, &type)) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (type == "call") {
        calls_.push_back(std::move(frame));
        cv_.notify_all();
      } else if (type == "sent") {
        int64_t req = 0;
        std::string code, message;
        if (r.Int(1, &req) && r.String(2, &code)) {
          r.String(3, &message);
          answers_[req] = rf::StatusOf(code, message);
          cv_.notify_all();
        }
      }
    }
  }

  // The plugin's send_trial, on whatever thread it calls from: asks the host
  // (which claims the id) and waits for its answer.
  Status SendTrial(int64_t id, const protocol::Packed& params) {
    uint64_t req;
    {
      std::lock_guard<std::mutex> lock(mu_);
      req = ++next_request_;
    }
    msgpack::sbuffer b;
    rf::Packer pk(b);
    pk.pack_array(4);
    rf::Str(pk, "send_trial");
    pk.pack_uint64(req);
    pk.pack_int64(id);
    rf::Bin(pk, params);
    Status st = channel_->Send(std::string(b.data(), b.size()));
    if (!st.ok()) return st;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return answers_.count(static_cast<int64_t>(req)) != 0; });
    Status answer = answers_[static_cast<int64_t>(req)];
    answers_.erase(static_cast<int64_t>(req));
    return answer;
  }

  // Runs one call and sends its reply; false after destroy.
  bool Serve(const std::string& frame) {
    rf::Reader r(frame);
    int64_t seq = 0;
    std::string op;
    if (!r.Int(1, &seq) || !r.String(2, &op)) return true;
    msgpack::sbuffer results;
    rf::Packer out(results);
    uint32_t count = 0;
    Status st = Dispatch(op, r, &out, &count);
    msgpack::sbuffer b;
    rf::Packer pk(b);
    pk.pack_array(4 + count);
    rf::Str(pk, "reply");
    pk.pack_int64(seq);
    rf::Str(pk, st.CodeName());
    rf::Str(pk, st.message());
    b.write(results.data(), results.size());
    (void)channel_->Send(std::string(b.data(), b.size()));
    return op != rf::kDestroy;
  }

  Status BadCall(const std::string& op) { return Status::Internal("malformed " + op + " call"); }

  // Argument i of the call (after "call", seq, op).
  static constexpr size_t kArg = 3;

  Status Dispatch(const std::string& op, const rf::Reader& r, rf::Packer* out, uint32_t* count) {
    if (op == rf::kCreate) return Create(r, out, count);
    if (op == rf::kDestroy) {
      tuner_.reset();
      assessor_.reset();
      return Status::Ok();
    }
    if (kind_ == "tuner" && !tuner_) return Status::BadState("no tuner instance");
    if (kind_ == "assessor" && !assessor_) return Status::BadState("no assessor instance");
    std::string a, b;
    int64_t id = 0;
    bool flag = false;
    double scalar = 0;
    if (op == rf::kUpdateSearchSpace) {
      if (!r.String(kArg, &a)) return BadCall(op);
      return tuner_->UpdateSearchSpace(a);
    }
    if (op == rf::kGenerate) {
      const msgpack::object* ids_obj = r.At(kArg);
      if (ids_obj == nullptr || ids_obj->type != msgpack::type::ARRAY) return BadCall(op);
      std::vector<int64_t> ids;
      for (uint32_t i = 0; i < ids_obj->via.array.size; ++i) {
        const msgpack::object& o = ids_obj->via.array.ptr[i];
        if (o.type == msgpack::type::POSITIVE_INTEGER) {
          ids.push_back(static_cast<int64_t>(o.via.u64));
        } else if (o.type == msgpack::type::NEGATIVE_INTEGER) {
          ids.push_back(o.via.i64);
        } else {
          return BadCall(op);
        }
      }
      std::vector<std::pair<int64_t, protocol::Packed>> params;
      bool no_more = false;
      Status st = tuner_->Generate(ids, &params, &no_more);
      out->pack_array(static_cast<uint32_t>(params.size()));
      for (const auto& [pid, p] : params) {
        out->pack_array(2);
        out->pack_int64(pid);
        rf::Bin(*out, p);
      }
      out->pack(no_more);
      *count = 2;
      return st;
    }
    if (op == rf::kReceiveTrialResult) {
      std::string value;
      if (!r.Int(kArg, &id) || !r.String(kArg + 1, &a) || !r.String(kArg + 2, &value) ||
          !r.Double(kArg + 3, &scalar) || !r.Bool(kArg + 4, &flag)) {
        return BadCall(op);
      }
      return tuner_->ReceiveTrialResult(id, a, value, scalar, flag);
    }
    if (op == rf::kTrialEnd) {
      if (!r.Int(kArg, &id) || !r.Bool(kArg + 1, &flag)) return BadCall(op);
      return tuner_->TrialEnd(id, flag);
    }
    if (op == rf::kImportData) {
      if (!r.String(kArg, &a)) return BadCall(op);
      bool supported = false;
      Status st = tuner_->ImportData(a, &supported);
      out->pack(supported);
      *count = 1;
      return st;
    }
    if (op == rf::kSaveState) {
      bool supported = false;
      std::string state;
      Status st = kind_ == "tuner" ? tuner_->SaveState(&state, &supported)
                                   : assessor_->SaveState(&state, &supported);
      out->pack(supported);
      rf::Bin(*out, state);
      *count = 2;
      return st;
    }
    if (op == rf::kLoadState) {
      if (!r.String(kArg, &a)) return BadCall(op);
      bool supported = false;
      Status st = kind_ == "tuner" ? tuner_->LoadState(a, &supported)
                                   : assessor_->LoadState(a, &supported);
      out->pack(supported);
      *count = 1;
      return st;
    }
    if (op == rf::kAssessTrial) {
      if (!r.String(kArg, &a) || !r.String(kArg + 1, &b)) return BadCall(op);
      bool good = true;
      Status st = assessor_->AssessTrial(a, b, &good);
      out->pack(good);
      *count = 1;
      return st;
    }
    if (op == rf::kAssessorTrialEnd) {
      if (!r.String(kArg, &a) || !r.Bool(kArg + 1, &flag)) return BadCall(op);
      return assessor_->TrialEnd(a, flag);
    }
    return Status::Internal("unknown call " + op);
  }

  Status Create(const rf::Reader& r, rf::Packer* out, uint32_t* count) {
    if (!load_status_.ok()) return load_status_;
    std::string id, class_args;
    if (!r.String(kArg, &id) || !r.String(kArg + 1, &class_args)) return BadCall(rf::kCreate);
    Status st;
    const PluginInfo* info = nullptr;
    if (kind_ == "tuner") {
      st = registry_.CreateTuner(
          id, class_args,
          [this](int64_t pid, protocol::Packed params) { return SendTrial(pid, params); },
          &tuner_);
      if (st.ok()) info = &tuner_->info();
    } else {
      st = registry_.CreateAssessor(id, class_args, &assessor_);
      if (st.ok()) info = &assessor_->info();
    }
    if (info != nullptr) {
      out->pack_array(2);
      rf::Str(*out, info->id);
      rf::Str(*out, info->name);
      *count = 1;
    }
    return st;
  }

  FrameChannel* channel_;
  std::string file_;
  std::string kind_;
  PluginRegistry registry_;
  Status load_status_;
  std::unique_ptr<Tuner> tuner_;
  std::unique_ptr<Assessor> assessor_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> calls_;
  std::map<int64_t, Status> answers_;
  uint64_t next_request_ = 0;
};

int Main(int argc, char** argv) {
  int fd = -1;
  pid_t parent = 0;
  std::string file, kind;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--fd") fd = std::atoi(argv[i + 1]);
    if (flag == "--file") file = argv[i + 1];
    if (flag == "--kind") kind = argv[i + 1];
    if (flag == "--parent") parent = static_cast<pid_t>(std::atoi(argv[i + 1]));
  }
  if (fd < 0 || file.empty() || (kind != "tuner" && kind != "assessor")) {
    std::fprintf(stderr,
                 "tunehost-plugin-runner: started by tunehost only (--fd N --file F --kind "
                 "tuner|assessor --parent PID)\n");
    return 2;
  }
  // Never outlive the host: a host killed with SIGKILL cannot stop us.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent != 0 && getppid() != parent) return 0;
  signal(SIGINT, SIG_IGN);  // Ctrl-C is for the host, which stops us itself
  FrameChannel channel(fd);
  auto sink = std::make_shared<ChannelSink>(&channel);
  auto logger = std::make_shared<spdlog::logger>("runner", sink);
  logger->set_level(spdlog::level::debug);
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%v");
  Runner runner(&channel, file, kind);
  return runner.Run();
}

}  // namespace
}  // namespace tunehost::host

int main(int argc, char** argv) { return tunehost::host::Main(argc, argv); }
