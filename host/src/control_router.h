// The control socket's requests (wire-format.md §4): decoded within the
// message limit, checked against the key's role (§9), and answered once
// each — at once, after the turn's commit, or when the tuner call they wait
// for returns (or the watchdog gives up on it, §4.3). Also the same control
// API for callers in the host's own process (Server::Ask, AnswerQuery).
// Loop thread only. Private to the host library.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tunehost/host/server.h"
#include "tunehost/protocol/codec.h"
#include "tunehost/protocol/limits.h"
#include "tunehost/status.h"

#include "pending_replies.h"

namespace tunehost::host {

class ControlRouter {
 public:
  using DoneFn = std::function<void(const Status&, const protocol::Packed&)>;

  // `server` must outlive this; its parts are used as they are needed.
  explicit ControlRouter(Server::Impl& server) : server_(server) {}

  // Reads a batch of requests (fairness between the sockets).
  void Drain();
  // The control API from the host's own process: at once (read-only
  // answers, Server::AnswerQuery) or on the loop thread (Server::Ask).
  Status AnswerQuery(const protocol::Body& request, protocol::Packed* data);
  void Ask(protocol::Body request, DoneFn done);
  // Answers every request still waiting for the tuner with `st`.
  void AnswerWaiting(const Status& st);

 private:
  // Who sent a request: its one reply goes back there.
  struct Peer {
    std::string identity;
    bool delimiter = false;  // REQ clients send an empty frame first
    uint64_t request_id = 0;
  };

  void Reply(const Peer& peer, const Status& st);
  void ReplyOk(const Peer& peer, protocol::Packed data = protocol::EmptyMap());
  // The reply leaves after the turn's commit: what it names is stored.
  void ReplyAfterCommit(const Peer& peer, Status st, protocol::Packed data = protocol::EmptyMap());
  void Handle(Peer peer, std::string_view bytes, const std::string& address,
              const std::string& user);
  // Why a request may not run now; OK when it may.
  Status Refusal(const protocol::Body& request) const;
  // The control API's queries and changes (ST LT GT JS MT EX UX KT LW):
  // `done` after the commit.
  void ControlRequest(const protocol::Body& request, DoneFn done);
  bool PostRequest(const Peer& peer, std::function<void(uint64_t)> fn, const char* call);
  void HandleInitialize(const Peer& peer, const protocol::Initialize& in);
  void HandleUpdateSearchSpace(const Peer& peer, const protocol::Packed& space);
  void HandleRequestTrialJobs(const Peer& peer, uint32_t count);
  void HandleImport(const Peer& peer, const protocol::ImportData& fd);
  void HandleCustomized(const Peer& peer, const protocol::AddCustomizedTrialJob& job);

  Server::Impl& server_;
  PendingReplies<Peer> waiting_{protocol::kMaxQueuedPluginRequests};
};

}  // namespace tunehost::host
