// The few HTTP requests the hub cache needs (HEAD, and GET into a file with resume), over
// libcurl loaded with dlopen on first use: binaries start without libcurl, and only a download
// needs it (Debian: libcurl4).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ssdq {

struct HttpResponse {
  long status = 0;                             // 0 when no response came
  std::map<std::string, std::string> headers;  // of the last response: names in lower case, values trimmed
  std::string body;                            // GET: the start of an error body (for messages); HEAD: empty
  std::string transport_error;                 // empty when the exchange completed
  bool unreachable = false;                    // the host could not be resolved or connected to
  std::string header(const std::string& lower_case_name) const;
};

class HttpClient {
 public:
  struct Options {
    long connect_timeout_seconds = 30;
    long stall_timeout_seconds = 60;  // abort a transfer that receives nothing for this long
    std::string user_agent = "ssdq/0.1";
  };
  // Loads libcurl; fails with an Error saying what to install when it is missing.
  explicit HttpClient(Options options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // HEAD without following redirects (a 3xx comes back with its Location header).
  HttpResponse head(const std::string& url, const std::vector<std::string>& request_headers);

  // GET following redirects (curl drops an Authorization header when a redirect changes host).
  // With resume_from > 0 it asks for "Range: bytes=<resume_from>-": a 206 answer is appended to
  // `path`, a 200 answer rewrites it from the start. Other statuses leave `path` as it was.
  // on_progress(bytes now in the file) is called as data arrives.
  HttpResponse get_to_file(const std::string& url, const std::vector<std::string>& request_headers,
                           const std::string& path, int64_t resume_from,
                           const std::function<void(int64_t)>& on_progress);

 private:
  Options options_;
  void* handle_ = nullptr;  // CURL*
};

// "scheme://host[:port]" of a URL, lower-cased; empty when it has no scheme.
std::string url_origin(const std::string& url);
// A redirect's Location resolved against the URL it answered.
std::string resolve_location(const std::string& base_url, const std::string& location);

}  // namespace ssdq
