#include "tunehost/host/key_ring.h"

#include <algorithm>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "tunehost/protocol/limits.h"

namespace tunehost::host {

namespace fs = std::filesystem;
namespace p = tunehost::protocol;

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kWorker: return "worker";
    case Role::kViewer: return "viewer";
    case Role::kAdmin: return "admin";
  }
  return "worker";
}

std::optional<Role> RoleOfUserId(std::string_view user_id) {
  const std::string_view role = user_id.substr(0, user_id.find(':'));
  for (Role r : {Role::kWorker, Role::kViewer, Role::kAdmin}) {
    if (role == RoleName(r)) return r;
  }
  return std::nullopt;
}

Status KeyRing::Load(const fs::path& dir, KeyRing* out) {
  *out = KeyRing{};
  // Whoever may write here may add an admin key or replace the host's own
  // pair: the directory, its role folders and every key must be this
  // user's and writable by nobody else (as ssh checks its files).
  const fs::path server_file = dir / "server.key_secret";
  Status st = p::ReadKeyFile(server_file, /*need_secret=*/true, &out->server_);
  if (!st.ok()) {
    return Status::BadState(st.message() + " (the host's key pair: tunectl keygen server --dir " +
                            dir.string() + ")");
  }
  for (const fs::path& path : {dir, server_file}) {
    st = p::CheckTrustedPath(path);
    if (!st.ok()) return st;
  }
  const struct {
    const char* folder;
    Role role;
  } roles[] = {{"workers", Role::kWorker}, {"viewers", Role::kViewer}, {"admins", Role::kAdmin}};
  for (const auto& r : roles) {
    const fs::path folder = dir / r.folder;
    std::error_code ec;
    if (!fs::exists(folder, ec)) continue;
    if (!fs::is_directory(folder, ec)) {
      return Status::BadState(folder.string() + " is not a folder: the " +
                              std::string(RoleName(r.role)) + " keys go in it as NAME.key files");
    }
    st = p::CheckTrustedPath(folder);
    if (!st.ok()) return st;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      if (entry.path().extension() == ".key") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      p::KeyPair key;
      st = p::ReadKeyFile(file, /*need_secret=*/false, &key);
      if (st.ok()) st = p::CheckTrustedPath(file);
      if (!st.ok()) return st;
      const std::string name = file.stem().string();
      if (name == kLocalWorkersKeyName) {
        return Status::BadState(file.string() + ": the name '" + name + "' is tunehost run's "
                                "own workers' key; rename the file");
      }
      st = out->Add(key.public_key, r.role, name);
      if (!st.ok()) return Status::BadState(file.string() + ": " + st.message());
    }
  }
  return Status::Ok();
}

const KeyHolder* KeyRing::Find(std::string_view key_bytes) const {
  auto it = by_key_.find(std::string(key_bytes));
  return it == by_key_.end() ? nullptr : &it->second;
}

Status KeyRing::Add(const std::string& public_key_z85, Role role, const std::string& name) {
  const std::string bytes = p::Z85KeyBytes(public_key_z85);
  if (bytes.empty()) return Status::BadField("not a Z85 public key");
  auto [it, fresh] = by_key_.emplace(bytes, KeyHolder{role, name});
  if (!fresh) {
    return Status::BadState("the key is already the " + std::string(RoleName(it->second.role)) +
                            " key '" + it->second.name + "'; one key has one role");
  }
  return Status::Ok();
}

size_t KeyRing::count(Role role) const {
  return static_cast<size_t>(std::count_if(by_key_.begin(), by_key_.end(),
                                           [role](const auto& kv) { return kv.second.role == role; }));
}

Status WorkerKeys::Check(const std::string& worker_id, const std::string& user,
                         const std::function<bool(const std::string&)>& in_use) {
  auto it = user_of_.find(worker_id);
  if (it == user_of_.end()) {
    if (user_of_.size() >= kMaxTies) {
      // Ids nobody uses any more (workers gone, ids made up) make room: a
      // key cannot fill the table and keep others out.
      for (auto i = user_of_.begin(); i != user_of_.end();) {
        i = in_use(i->first) ? std::next(i) : user_of_.erase(i);
      }
    }
    if (user_of_.size() >= kMaxTies) {
      return Status::BadState("worker " + worker_id + " refused: " + std::to_string(kMaxTies) +
                              " workers in use is the limit");
    }
    user_of_.emplace(worker_id, user);
    return Status::Ok();
  }
  if (it->second == user) return Status::Ok();
  return Status::Forbidden("worker " + worker_id + " belongs to key '" + it->second +
                           "': a message for it from key '" + user + "' is refused");
}

void WorkerKeys::Tie(const std::string& worker_id, const std::string& user) {
  user_of_[worker_id] = user;
}

namespace {

template <class T, class = void>
struct HasWorkerId : std::false_type {};
template <class T>
struct HasWorkerId<T, std::void_t<decltype(std::declval<T>().worker_id)>> : std::true_type {};

}  // namespace

std::optional<std::string> WorkerIdOf(const p::Body& body) {
  return std::visit(
      [](const auto& b) -> std::optional<std::string> {
        if constexpr (HasWorkerId<std::decay_t<decltype(b)>>::value) {
          return b.worker_id;
        } else {
          return std::nullopt;
        }
      },
      body);
}

bool RoleMaySocket(Role role, std::string_view socket) {
  if (socket == "jobs" || socket == "results") return role != Role::kViewer;
  return true;
}

bool RoleMayRequest(Role role, const p::Body& request) {
  switch (role) {
    case Role::kAdmin: return true;
    case Role::kWorker: return false;
    case Role::kViewer:
      return std::holds_alternative<p::Ping>(request) ||
             std::holds_alternative<p::GetStatus>(request) ||
             std::holds_alternative<p::ListTrials>(request) ||
             std::holds_alternative<p::GetTrial>(request) ||
             std::holds_alternative<p::GetStatistics>(request) ||
             std::holds_alternative<p::GetMetrics>(request) ||
             std::holds_alternative<p::ExportData>(request) ||
             std::holds_alternative<p::ListWorkers>(request);
  }
  return false;
}

bool IsLoopbackEndpoint(std::string_view endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string_view rest = endpoint.substr(6);
  // A bind may name a source address: "tcp://src;dst". The host binds only.
  if (rest.find(';') != std::string_view::npos) return false;
  std::string_view host;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return false;
    host = rest.substr(1, close - 1);
  } else {
    host = rest.substr(0, rest.rfind(':'));
  }
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8, written as four decimal parts.
  if (host.rfind("127.", 0) != 0) return false;
  int parts = 0;
  size_t i = 0;
  while (i <= host.size()) {
    const size_t dot = std::min(host.find('.', i), host.size());
    const std::string_view part = host.substr(i, dot - i);
    if (part.empty() || part.size() > 3 ||
        !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        std::stoi(std::string(part)) > 255) {
      return false;
    }
    ++parts;
    i = dot + 1;
  }
  return parts == 4;
}

}  // namespace tunehost::host
