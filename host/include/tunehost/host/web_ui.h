// The web UI: an HTTP server (cpp-httplib, its own threads) that serves one
// page and a JSON API over the control API of a running Server (Server::Ask),
// and the same page as one offline file for `tunehost report`.
//
// Access: two random tokens made at start, an admin one (queries and the
// control actions) and a viewer one (queries only), as the CURVE roles of
// wire-format.md §9. The URL tunehost prints carries the admin token; the
// page turns it into a cookie. The server answers only Host headers naming
// the address it is bound to (no DNS rebinding), changes only on POSTs with
// a JSON body (no cross-site form posts), and binds loopback unless it
// speaks TLS (a certificate and key given) or is told --insecure.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "tunehost/status.h"

namespace tunehost::host {

class Server;

struct WebUiOptions {
  std::string address = "127.0.0.1";
  int port = 0;  // 0: a free port
  // Where the trials' directories are (<dir>/trials/<trial id>), shown as
  // each trial's log directory; empty: not shown.
  std::filesystem::path experiment_dir;
  bool read_only = false;  // a viewed experiment: no control actions
  // HTTPS with this certificate chain and private key (PEM); both or neither.
  std::string cert_file, key_file;
  std::chrono::milliseconds answer_timeout{10000};
};

class WebUi {
 public:
  // `server` must outlive the WebUi (destroy the WebUi first).
  WebUi(Server* server, WebUiOptions options);
  ~WebUi();
  WebUi(const WebUi&) = delete;
  WebUi& operator=(const WebUi&) = delete;

  // Binds and starts serving. Errors name the address.
  Status Start();
  void Stop();
  int port() const;
  // http(s)://ADDRESS:PORT/?token=... with the admin or the viewer token
  // (a wildcard address is shown as the machine's name).
  std::string Url(bool admin) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The UI page as one self-contained HTML file: styles, scripts and
// `data_json` (an object {session, status, trials, metrics} shaped as the
// API's replies) inlined.
std::string ReportPage(const std::string& data_json);

// The parts of a web UI address ("8080", "127.0.0.1:8080", "[::1]:0", "off").
// *enabled is false for "off". Loopback only, unless options->cert_file is
// set (TLS) or `insecure`.
Status ParseWebUiAddress(const std::string& text, bool insecure, bool* enabled,
                         WebUiOptions* options);

}  // namespace tunehost::host
