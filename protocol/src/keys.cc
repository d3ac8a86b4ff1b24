#include "tunehost/protocol/keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

namespace tunehost::protocol {

namespace fs = std::filesystem;

namespace {

constexpr size_t kZ85KeyChars = 40;
constexpr size_t kKeyBytes = 32;
constexpr size_t kMaxKeyFileBytes = 64 * 1024;

std::string Header(const char* what, const char* advice) {
  char when[64] = "";
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (gmtime_r(&now, &tm) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  std::ostringstream out;
  out << "#   ****  Generated on " << when << " UTC by tunehost  ****\n"
      << "#   ZeroMQ CURVE " << what << " Certificate\n"
      << "#   " << advice << "\n\n"
      << "metadata\n"
      << "curve\n";
  return out.str();
}

// Creates `file` with exactly `mode`, failing when it exists.
Status WriteNew(const fs::path& file, const std::string& text, mode_t mode) {
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) {
      return Status::BadState(file.string() + " already exists: not overwriting a key");
    }
    return Status::Internal("cannot create " + file.string() + ": " + std::strerror(errno));
  }
  Status st;
  if (fchmod(fd, mode) != 0 ||
      write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    st = Status::Internal("cannot write " + file.string() + ": " + std::strerror(errno));
  }
  if (close(fd) != 0 && st.ok()) {
    st = Status::Internal("cannot write " + file.string() + ": " + std::strerror(errno));
  }
  if (!st.ok()) unlink(file.c_str());
  return st;
}

// The quoted value of `key = "..."` on a line of a certificate, if any.
bool ValueOf(const std::string& line, std::string_view key, std::string* value) {
  const size_t start = line.find_first_not_of(" \t");
  if (start == std::string::npos || line.compare(start, key.size(), key) != 0) return false;
  const size_t eq = line.find('=', start + key.size());
  const size_t open = eq == std::string::npos ? eq : line.find('"', eq);
  const size_t close = open == std::string::npos ? open : line.find('"', open + 1);
  if (close == std::string::npos) return false;
  *value = line.substr(open + 1, close - open - 1);
  return true;
}

}  // namespace

bool IsZ85Key(std::string_view text) { return !Z85KeyBytes(text).empty(); }

std::string Z85KeyBytes(std::string_view text) {
  if (text.size() != kZ85KeyChars) return "";
  const std::string z85(text);  // zmq_z85_decode wants a terminated string
  std::string bytes(kKeyBytes, '\0');
  if (zmq_z85_decode(reinterpret_cast<uint8_t*>(bytes.data()), z85.c_str()) == nullptr) return "";
  return bytes;
}

std::string Z85KeyText(std::string_view bytes) {
  if (bytes.size() != kKeyBytes) return "";
  char text[kZ85KeyChars + 1] = {};
  if (zmq_z85_encode(text, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) ==
      nullptr) {
    return "";
  }
  return text;
}

Status GenerateKeyPair(KeyPair* out) {
  char pub[kZ85KeyChars + 1] = {};
  char sec[kZ85KeyChars + 1] = {};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return Status::Unavailable(std::string("cannot make a CURVE key pair: ") +
                               zmq_strerror(zmq_errno()));
  }
  out->public_key = pub;
  out->secret_key = sec;
  return Status::Ok();
}

Status WriteKeyPair(const fs::path& dir, const std::string& name, const KeyPair& keys) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return Status::BadField("key name '" + name + "' must be a plain file name");
  }
  if (!IsZ85Key(keys.public_key) || !IsZ85Key(keys.secret_key)) {
    return Status::BadField("not a CURVE key pair");
  }
  Status st = MakePrivateDirectories(dir);
  if (!st.ok()) return st;
  std::error_code ec;
  const fs::path public_file = dir / (name + ".key");
  const fs::path secret_file = dir / (name + ".key_secret");
  if (fs::exists(public_file, ec) || fs::exists(secret_file, ec)) {
    return Status::BadState((fs::exists(public_file, ec) ? public_file : secret_file).string() +
                            " already exists: not overwriting a key");
  }
  st = WriteNew(secret_file,
                Header("**Secret**", "DO NOT PROVIDE THIS FILE TO OTHER USERS nor change "
                                     "its permissions.") +
                    "    public-key = \"" + keys.public_key + "\"\n" +
                    "    secret-key = \"" + keys.secret_key + "\"\n",
                0600);
  if (!st.ok()) return st;
  st = WritePublicKey(public_file, keys.public_key);
  if (!st.ok()) unlink(secret_file.c_str());
  return st;
}

Status MakePrivateDirectories(const fs::path& dir) {
  std::error_code ec;
  fs::path path;
  for (const fs::path& part : fs::absolute(dir, ec).lexically_normal()) {
    path /= part;
    if (ec || part.empty() || fs::exists(path, ec)) continue;
    if (!fs::create_directory(path, ec) && ec) break;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec) break;
  }
  if (ec) return Status::Internal("cannot create " + dir.string() + ": " + ec.message());
  return Status::Ok();
}

Status CheckTrustedPath(const fs::path& path) {
  struct stat sb {};
  if (stat(path.c_str(), &sb) != 0) {
    return Status::NotFound(path.string() + ": " + std::strerror(errno));
  }
  if (sb.st_uid != geteuid() && sb.st_uid != 0) {
    return Status::BadState(path.string() + " belongs to user id " + std::to_string(sb.st_uid) +
                            ", not to you: refusing to trust it");
  }
  if ((sb.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(sb.st_mode & 07777));
    return Status::BadState(path.string() + " has permissions " + mode +
                            ": others may change it, so it cannot be trusted (chmod go-w)");
  }
  return Status::Ok();
}

std::string PublicCertificate(const std::string& public_key) {
  return Header("Public", "Exchange securely, or check its contents after exchange.") +
         "    public-key = \"" + public_key + "\"\n";
}

Status WritePublicKey(const fs::path& file, const std::string& public_key) {
  if (!IsZ85Key(public_key)) return Status::BadField("not a CURVE public key");
  return WriteNew(file, PublicCertificate(public_key), 0644);
}

Status ReadKeyFile(const fs::path& file, bool need_secret, KeyPair* out) {
  *out = KeyPair{};
  struct stat sb {};
  if (stat(file.c_str(), &sb) != 0) {
    return Status::NotFound("key file " + file.string() + ": " + std::strerror(errno));
  }
  if (!S_ISREG(sb.st_mode) || sb.st_size > static_cast<off_t>(kMaxKeyFileBytes)) {
    return Status::BadField("key file " + file.string() + " is not a certificate");
  }
  std::ifstream in(file);
  std::string line, value;
  while (std::getline(in, line)) {
    if (ValueOf(line, "public-key", &value)) out->public_key = value;
    if (ValueOf(line, "secret-key", &value)) out->secret_key = value;
  }
  if (!IsZ85Key(out->public_key)) {
    return Status::BadField("key file " + file.string() + " has no valid public-key (40 "
                            "characters of Z85)");
  }
  if (!out->secret_key.empty() && !IsZ85Key(out->secret_key)) {
    return Status::BadField("key file " + file.string() + " has an invalid secret-key");
  }
  if (need_secret) {
    if (out->secret_key.empty()) {
      return Status::BadField("key file " + file.string() + " has no secret-key (give the "
                              ".key_secret file, not the public .key)");
    }
    char derived[kZ85KeyChars + 1] = {};
    if (zmq_curve_public(derived, out->secret_key.c_str()) != 0 ||
        out->public_key != derived) {
      return Status::BadField("key file " + file.string() +
                              ": its public-key does not belong to its secret-key");
    }
    if ((sb.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(sb.st_mode & 07777));
      return Status::BadState("key file " + file.string() + " has permissions " + mode +
                              ": a secret key must be readable by its owner only (chmod 600)");
    }
  }
  return Status::Ok();
}

}  // namespace tunehost::protocol
