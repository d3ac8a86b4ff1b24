// CurveZMQ key pairs in files (wire-format.md §9). Keys are ZeroMQ's Z85
// text (40 characters for 32 bytes) in the certificate files czmq and
// pyzmq's zmq.auth write: NAME.key holds the public key and may be shared;
// NAME.key_secret holds both keys and is readable by its owner only. Keys
// travel as file paths, never on a command line or in a log.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "tunehost/status.h"

namespace tunehost::protocol {

struct KeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters; empty for a public certificate
};

// A new key pair from libzmq (zmq_curve_keypair).
Status GenerateKeyPair(KeyPair* out);

// Writes DIR/NAME.key (public, 0644) and DIR/NAME.key_secret (0600, whatever
// the umask), creating DIR and its missing parents (0700) when missing. Refuses to overwrite either
// file, and a NAME that is not a plain file name.
Status WriteKeyPair(const std::filesystem::path& dir, const std::string& name,
                    const KeyPair& keys);

// The text of a public certificate holding `public_key`.
std::string PublicCertificate(const std::string& public_key);
// Writes a public certificate FILE (0644) holding `public_key`; refuses to
// overwrite it.
Status WritePublicKey(const std::filesystem::path& file, const std::string& public_key);

// Reads a certificate file: the public key always, the secret key when the
// file has one. With `need_secret`, a file without a secret key, or one that
// its group or others may read or write (as ssh refuses such a key), is an
// error that names the file.
Status ReadKeyFile(const std::filesystem::path& file, bool need_secret, KeyPair* out);

// Creates `dir` and any missing parent, each made 0700 whatever the umask
// (folders that exist are left as they are). Files of keys and experiments
// are their user's (wire-format.md §9).
Status MakePrivateDirectories(const std::filesystem::path& dir);
// Whether a file or folder that says who may connect, or where to connect,
// is safe to trust, as ssh checks its own files: owned by this user (or
// root) and writable by nobody else. The error names the path and the fix.
Status CheckTrustedPath(const std::filesystem::path& path);

// True for 40 characters of Z85 that decode to 32 bytes.
bool IsZ85Key(std::string_view text);
// The 32 bytes of a Z85 key ("" when it is not one).
std::string Z85KeyBytes(std::string_view text);
// Z85 text of 32 key bytes.
std::string Z85KeyText(std::string_view bytes);

}  // namespace tunehost::protocol
