// The web UI server: routes, access checks and the bridge to Server::Ask.
#include "tunehost/host/web_ui.h"

#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <string_view>
#include <thread>
#include <utility>

#include <unistd.h>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "tunehost/host/server.h"
#include "tunehost/protocol/codec.h"
#include "web_assets.h"

namespace tunehost::host {

namespace p = tunehost::protocol;

namespace {

constexpr size_t kMaxBodyBytes = 64 * 1024;

std::string RandomToken() {
  std::random_device rd;  // the kernel's random source on Linux
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = rd();
    for (int j = 0; j < 8; ++j) token += kHex[(v >> (4 * j)) & 0xf];
  }
  return token;
}

// Same time whatever the first difference.
bool SameToken(std::string_view a, std::string_view b) {
  if (a.size() != b.size() || a.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// The value of cookie `name` in a Cookie header, or "".
std::string CookieValue(const std::string& header, const std::string& name) {
  size_t pos = 0;
  while (pos < header.size()) {
    size_t end = header.find(';', pos);
    if (end == std::string::npos) end = header.size();
    std::string_view part(header.data() + pos, end - pos);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    if (part.size() > name.size() && part.substr(0, name.size()) == name &&
        part[name.size()] == '=') {
      return std::string(part.substr(name.size() + 1));
    }
    pos = end + 1;
  }
  return "";
}

int HttpStatusOf(const Status& st) {
  switch (st.code()) {
    case Status::Code::kNotFound: return 404;
    case Status::Code::kBadState: return 409;
    case Status::Code::kForbidden: return 403;
    case Status::Code::kUnavailable: return 503;
    case Status::Code::kBadField:
    case Status::Code::kMissingField:
    case Status::Code::kTooLarge: return 400;
    default: return 500;
  }
}

void SetJson(httplib::Response& res, std::string json) {
  res.set_header("Cache-Control", "no-store");
  res.set_content(std::move(json), "application/json");
}

void SetError(httplib::Response& res, const Status& st) {
  res.status = HttpStatusOf(st);
  nlohmann::json j = {{"error", std::string(st.CodeName())}, {"message", st.message()}};
  SetJson(res, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// Inside an inline <script>, "</" could end it early.
std::string ScriptSafe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') out += '\\';
  }
  return out;
}

std::string Page(std::string_view style, std::string_view scripts) {
  std::string page(web_assets::kIndexHtml);
  auto replace = [&page](std::string_view key, std::string_view with) {
    size_t at = page.find(key);
    if (at != std::string::npos) page.replace(at, key.size(), with);
  };
  replace("{{STYLE}}", style);
  replace("{{SCRIPTS}}", scripts);
  return page;
}

}  // namespace

std::string ReportPage(const std::string& data_json) {
  // JSON has '<' only inside strings, where \u003c means the same.
  std::string data;
  for (char c : data_json) data += c == '<' ? std::string("\\u003c") : std::string(1, c);
  return Page("<style>\n" + ScriptSafe(web_assets::kAppCss) + "</style>",
              // As JSON, parsed (an object literal would lose a "__proto__" key).
              "<script type=\"application/json\" id=\"tunehost-report-data\">" + data +
                  "</script>\n<script>window.TUNEHOST_REPORT = JSON.parse(document."
                  "getElementById('tunehost-report-data').textContent);</script>\n<script>" +
                  ScriptSafe(web_assets::kChartJs) + "</script>\n<script>" +
                  ScriptSafe(web_assets::kAppJs) + "</script>");
}

Status ParseWebUiAddress(const std::string& text, bool insecure, bool* enabled,
                         WebUiOptions* options) {
  *enabled = text != "off";
  if (!*enabled) return Status::Ok();
  std::string address = "127.0.0.1", port = text;
  size_t colon = text.rfind(':');
  if (colon != std::string::npos) {
    address = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (address.size() >= 2 && address.front() == '[' && address.back() == ']') {
      address = address.substr(1, address.size() - 2);
    }
  }
  char* end = nullptr;
  long n = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || n < 0 || n > 65535 || address.empty()) {
    return Status::BadField("--ui " + text + ": expected PORT, ADDRESS:PORT or off");
  }
  const bool loopback = address == "127.0.0.1" || address == "::1" || address == "localhost";
  if (!loopback && !insecure && options->cert_file.empty()) {
    return Status::Forbidden("--ui " + text +
                             ": without TLS the web UI binds loopback only (reach it with ssh -L " +
                             port + ":127.0.0.1:" + port +
                             "); elsewhere give --ui-cert and --ui-key, or --insecure");
  }
  options->address = address == "localhost" ? "127.0.0.1" : address;
  options->port = static_cast<int>(n);
  return Status::Ok();
}

struct WebUi::State {
  State(Server* s, WebUiOptions o) : server(s), options(std::move(o)) {}

  Server* server;
  WebUiOptions options;
  std::string admin_token = RandomToken();
  std::string viewer_token = RandomToken();
  std::unique_ptr<httplib::Server> server_storage = MakeServer();
  httplib::Server& http = *server_storage;
  std::thread thread;
  std::atomic<bool> listening_ended{false};
  std::atomic<bool> stopping{false};
  int port = 0;

  bool tls() const { return !options.cert_file.empty(); }

  std::unique_ptr<httplib::Server> MakeServer() const {
    if (!tls()) return std::make_unique<httplib::Server>();
    return std::make_unique<httplib::SSLServer>(options.cert_file.c_str(),
                                                options.key_file.c_str());
  }

  std::string CookieName() const { return "tunehost_token_" + std::to_string(port); }

  // The role of a request's token: "admin", "viewer" or "" (none).
  std::string RoleOf(const httplib::Request& req) const {
    std::string token = CookieValue(req.get_header_value("Cookie"), CookieName());
    const std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0) token = auth.substr(7);
    if (SameToken(token, admin_token)) return "admin";
    if (SameToken(token, viewer_token)) return "viewer";
    return "";
  }

  // Only the names this server is reached by (a rebound DNS name is not).
  // Bound to every address (--insecure), it is reached by any name: the
  // tokens are the guard then.
  bool HostAllowed(const httplib::Request& req) const {
    if (options.address == "0.0.0.0" || options.address == "::") return true;
    const std::string host = req.get_header_value("Host");
    const std::string p = ":" + std::to_string(port);
    return host == "127.0.0.1" + p || host == "localhost" + p || host == "[::1]" + p ||
           host == options.address + p || host == "[" + options.address + "]" + p;
  }

  // A control API request answered on the server's loop thread.
  Status Ask(p::Body body, std::string* json) {
    auto promise = std::make_shared<std::promise<std::pair<Status, p::Packed>>>();
    std::future<std::pair<Status, p::Packed>> answer = promise->get_future();
    server->Ask(std::move(body), [promise](const Status& st, const p::Packed& data) {
      promise->set_value({st, data});
    });
    // In slices, so a stopping UI does not wait out the timeout.
    const auto deadline = std::chrono::steady_clock::now() + options.answer_timeout;
    while (answer.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      if (stopping || std::chrono::steady_clock::now() >= deadline) {
        return Status::Unavailable(stopping ? "the host is stopping"
                                            : "the host did not answer in time");
      }
    }
    auto [st, data] = answer.get();
    if (st.ok()) *json = p::PackedToJson(data);
    return st;
  }

  void Answer(p::Body body, httplib::Response& res) {
    std::string json;
    Status st = Ask(std::move(body), &json);
    st.ok() ? SetJson(res, std::move(json)) : SetError(res, st);
  }

  std::string Url(bool admin) const {
    std::string a = options.address;
    if (a == "0.0.0.0" || a == "::") {  // every address: the machine's name
      char name[256] = {};
      a = gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "127.0.0.1";
    }
    return (tls() ? "https://" : "http://") +
           (a.find(':') != std::string::npos ? "[" + a + "]" : a) + ":" +
           std::to_string(port) + "/?token=" + (admin ? admin_token : viewer_token);
  }

  void Routes();
};

void WebUi::State::Routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");  // the URL may carry the token
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
    if (!HostAllowed(req)) {
      res.status = 403;
      res.set_content("tunehost: unexpected Host header\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path == "/" && req.has_param("token")) {
      const std::string token = req.get_param_value("token");
      if (SameToken(token, admin_token) || SameToken(token, viewer_token)) {
        res.set_header("Set-Cookie",
                       CookieName() + "=" + token + "; Path=/; HttpOnly; SameSite=Lax" +
                           (tls() ? "; Secure" : ""));
        res.set_redirect("/", 303);  // the token leaves the address bar
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (RoleOf(req).empty()) {
      res.status = 401;
      if (req.path.rfind("/api/", 0) == 0) {
        SetError(res, Status::Forbidden(
                          "no valid token: open the URL tunehost printed (it carries ?token=)"));
        res.status = 401;
      } else {
        res.set_content("tunehost: open the URL tunehost printed at start (it carries "
                        "?token=...); it is also in the experiment's host.json\n",
                        "text/plain");
      }
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.method == "POST") {
      if (req.get_header_value("Content-Type").rfind("application/json", 0) != 0) {
        SetError(res, Status::BadField("POST bodies are JSON (Content-Type: application/json)"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (RoleOf(req) != "admin") {
        SetError(res, Status::Forbidden("this needs the admin role; the token has viewer"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (options.read_only) {
        SetError(res, Status::BadState("experiment is viewed read-only"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  auto asset = [this](const char* path, std::string_view body, const char* type) {
    http.Get(path, [body, type](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(body), type);
    });
  };
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(Page("<link rel=\"stylesheet\" href=\"app.css\">",
                         "<script src=\"chart.js\"></script>\n<script src=\"app.js\"></script>"),
                    "text/html; charset=utf-8");
  });
  asset("/app.css", web_assets::kAppCss, "text/css; charset=utf-8");
  asset("/app.js", web_assets::kAppJs, "text/javascript; charset=utf-8");
  asset("/chart.js", web_assets::kChartJs, "text/javascript; charset=utf-8");

  http.Get("/api/session", [this](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json j = {{"role", RoleOf(req)},
                        {"live", true},
                        {"read_only", options.read_only},
                        {"experiment_dir", options.experiment_dir.string()},
                        {"version", TH_HOST_VERSION}};
    // An admin may hand out the read-only link.
    if (j["role"] == "admin") j["viewer_url"] = Url(false);
    SetJson(res, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  });
  http.Get("/api/status", [this](const httplib::Request&, httplib::Response& res) {
    Answer(p::GetStatus{}, res);
  });
  http.Get("/api/trials", [this](const httplib::Request&, httplib::Response& res) {
    Answer(p::ListTrials{}, res);
  });
  http.Get("/api/metrics", [this](const httplib::Request&, httplib::Response& res) {
    Answer(p::GetMetrics{}, res);
  });
  http.Get("/api/workers", [this](const httplib::Request&, httplib::Response& res) {
    Answer(p::ListWorkers{}, res);
  });
  http.Post(R"(/api/trials/([^/]+)/kill)",
            [this](const httplib::Request& req, httplib::Response& res) {
              Answer(p::KillTrial{req.matches[1].str()}, res);
            });
  http.Post("/api/limits", [this](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json j = nlohmann::json::parse(req.body, nullptr, false);
    if (!j.is_object()) {
      SetError(res, Status::BadField("the body is not a JSON object"));
      return;
    }
    p::UpdateLimits limits;
    for (const auto& [key, value] : j.items()) {
      const bool count = key == "concurrency" || key == "max_trials";
      if (count ? !value.is_number_unsigned() || (key == "concurrency" &&
                                                  value.get<uint64_t>() > UINT32_MAX)
                : key != "max_duration_s" || !value.is_number()) {
        SetError(res, Status::BadField(
                          key + ": expected concurrency and max_trials as whole numbers ≥ 0, "
                                "max_duration_s as seconds"));
        return;
      }
      if (key == "concurrency") limits.concurrency = value.get<uint32_t>();
      if (key == "max_trials") limits.max_trials = value.get<uint64_t>();
      if (key == "max_duration_s") limits.max_duration_s = value.get<double>();
    }
    Answer(limits, res);
  });
}

WebUi::WebUi(Server* server, WebUiOptions options)
    : state_(std::make_unique<State>(server, std::move(options))) {}

WebUi::~WebUi() { Stop(); }

Status WebUi::Start() {
  State& s = *state_;
  if (s.tls() && !s.http.is_valid()) {
    return Status::BadField("web UI: cannot use the certificate " + s.options.cert_file +
                            " with the key " + s.options.key_file +
                            " (PEM files, the key unencrypted)");
  }
  s.http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  s.http.set_payload_max_length(kMaxBodyBytes);
  s.http.set_read_timeout(5, 0);
  s.http.set_write_timeout(5, 0);
  s.Routes();
  const std::string where = s.options.address + ":" + std::to_string(s.options.port);
  if (s.options.port == 0) {
    s.port = s.http.bind_to_any_port(s.options.address);
  } else if (s.http.bind_to_port(s.options.address, s.options.port)) {
    s.port = s.options.port;
  } else {
    s.port = -1;
  }
  if (s.port <= 0) return Status::Unavailable("web UI: cannot listen on " + where);
  s.thread = std::thread([&s] {
    if (!s.http.listen_after_bind()) spdlog::error("web UI: the HTTP server stopped");
    s.listening_ended = true;
  });
  // Until it listens, stop() would not reach it.
  while (!s.http.is_running() && !s.listening_ended) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status::Ok();
}

void WebUi::Stop() {
  if (!state_->thread.joinable()) return;
  state_->stopping = true;
  state_->http.stop();
  state_->thread.join();
}

int WebUi::port() const { return state_->port; }

std::string WebUi::Url(bool admin) const { return state_->Url(admin); }

}  // namespace tunehost::host
