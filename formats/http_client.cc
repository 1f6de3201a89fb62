#include "formats/http_client.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <type_traits>
#include <utility>

#include "formats/error.h"
#include "formats/file_io.h"

namespace ssdq {
namespace {

// The libcurl functions used, resolved from the shared library at run time.
struct CurlLibrary {
  CURLcode (*global_init)(long);
  CURL* (*easy_init)();
  void (*easy_reset)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_perform)(CURL*);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  void (*easy_cleanup)(CURL*);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);

  static const CurlLibrary& get() {
    static const CurlLibrary library = load();
    return library;
  }

 private:
  static CurlLibrary load() {
    void* handle = nullptr;
    std::string errors;
    for (const char* name : {"libcurl.so.4", "libcurl-gnutls.so.4", "libcurl.so"}) {
      handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle) break;
      const char* why = ::dlerror();
      errors += fmt::format("{}{}", errors.empty() ? "" : "; ", why ? why : name);
    }
    if (!handle)
      fail("downloading from the Hugging Face hub needs libcurl, which was not found ({}); install it (Debian/Ubuntu: "
           "apt-get install libcurl4), or fill the cache elsewhere and set HF_HUB_OFFLINE=1",
           errors);
    CurlLibrary lib{};
    auto bind = [&](auto& slot, const char* symbol) {
      void* address = ::dlsym(handle, symbol);
      if (!address) fail("libcurl has no {}; it is too old for ssdq's downloads", symbol);
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(address);
    };
    bind(lib.global_init, "curl_global_init");
    bind(lib.easy_init, "curl_easy_init");
    bind(lib.easy_reset, "curl_easy_reset");
    bind(lib.easy_setopt, "curl_easy_setopt");
    bind(lib.easy_perform, "curl_easy_perform");
    bind(lib.easy_getinfo, "curl_easy_getinfo");
    bind(lib.easy_cleanup, "curl_easy_cleanup");
    bind(lib.easy_strerror, "curl_easy_strerror");
    bind(lib.slist_append, "curl_slist_append");
    bind(lib.slist_free_all, "curl_slist_free_all");
    if (lib.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) fail("libcurl failed to initialize");
    return lib;
  }
};

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r\n") + 1 - begin);
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto& response = *static_cast<HttpResponse*>(user);
  const std::string line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) {
    response.headers.clear();  // a new response (after a redirect or a 100 Continue)
  } else if (const size_t colon = line.find(':'); colon != std::string::npos) {
    response.headers[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
  }
  return size * count;
}

size_t discard_body(char*, size_t size, size_t count, void*) { return size * count; }

constexpr size_t kMaxErrorBody = 4096;

struct FileSink {
  const CurlLibrary* lib;
  CURL* curl;
  HttpResponse* response;
  std::string path;
  int64_t resume_from;
  const std::function<void(int64_t)>* on_progress;
  int fd = -1;
  bool decided = false;
  int64_t in_file = 0;
  std::string error;
};

// Waits for the first body byte of the final response to decide where the body goes: appended
// to the partial file (206 for our range), over it (200), or kept for the error message.
size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto& sink = *static_cast<FileSink*>(user);
  const size_t bytes = size * count;
  if (!sink.decided) {
    long status = 0;
    sink.lib->easy_getinfo(sink.curl, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300 && status < 400) return bytes;  // the body of a redirect being followed
    sink.decided = true;
    if (status == 206 && sink.resume_from > 0) {
      const std::string range = sink.response->header("content-range");
      if (range.rfind(fmt::format("bytes {}-", sink.resume_from), 0) != 0) {
        sink.error = fmt::format("asked for bytes {}- but the server sent the range '{}'", sink.resume_from, range);
        return 0;
      }
      sink.fd = ::open(sink.path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
      sink.in_file = sink.resume_from;
    } else if (status == 200) {
      sink.fd = ::open(sink.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      sink.in_file = 0;
    } else {
      sink.response->body.assign(data, std::min(bytes, kMaxErrorBody));
      return bytes;
    }
    if (sink.fd < 0) {
      sink.error = fmt::format("{}: cannot open for writing: {}", sink.path, std::strerror(errno));
      return 0;
    }
  }
  if (sink.fd < 0) {
    const size_t room = kMaxErrorBody - std::min(kMaxErrorBody, sink.response->body.size());
    sink.response->body.append(data, std::min(bytes, room));
    return bytes;
  }
  try {
    write_all(sink.fd, data, bytes, sink.path);
  } catch (const Error& e) {
    sink.error = e.what();
    return 0;  // makes curl stop with CURLE_WRITE_ERROR
  }
  sink.in_file += static_cast<int64_t>(bytes);
  if (*sink.on_progress) (*sink.on_progress)(sink.in_file);
  return bytes;
}

class HeaderList {
 public:
  HeaderList(const CurlLibrary& lib, const std::vector<std::string>& lines) : lib_(lib) {
    for (const std::string& line : lines) list_ = lib_.slist_append(list_, line.c_str());
  }
  ~HeaderList() { lib_.slist_free_all(list_); }
  curl_slist* get() const { return list_; }

 private:
  const CurlLibrary& lib_;
  curl_slist* list_ = nullptr;
};

}  // namespace

std::string HttpResponse::header(const std::string& lower_case_name) const {
  auto found = headers.find(lower_case_name);
  return found == headers.end() ? "" : found->second;
}

HttpClient::HttpClient(Options options) : options_(std::move(options)) {
  handle_ = CurlLibrary::get().easy_init();
  if (!handle_) fail("libcurl could not create a transfer handle");
}

HttpClient::~HttpClient() { CurlLibrary::get().easy_cleanup(static_cast<CURL*>(handle_)); }

namespace {

void set_common_options(const CurlLibrary& lib, CURL* curl, const HttpClient::Options& options, const std::string& url,
                        const HeaderList& headers, HttpResponse& response, char* error_buffer) {
  lib.easy_reset(curl);
  lib.easy_setopt(curl, CURLOPT_URL, url.c_str());
  lib.easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  lib.easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  lib.easy_setopt(curl, CURLOPT_USERAGENT, options.user_agent.c_str());
  lib.easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
  lib.easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, options.connect_timeout_seconds);
  lib.easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  lib.easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, options.stall_timeout_seconds);
  lib.easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");  // refused by libcurl < 7.85: harmless
  lib.easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  lib.easy_setopt(curl, CURLOPT_HEADERFUNCTION, &on_header);
  lib.easy_setopt(curl, CURLOPT_HEADERDATA, &response);
}

void finish(const CurlLibrary& lib, CURL* curl, CURLcode result, const char* error_buffer, HttpResponse& response) {
  lib.easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  if (result == CURLE_OK) return;
  response.transport_error = error_buffer[0] ? error_buffer : lib.easy_strerror(result);
  response.unreachable = response.status == 0 &&
                         (result == CURLE_COULDNT_RESOLVE_HOST || result == CURLE_COULDNT_RESOLVE_PROXY ||
                          result == CURLE_COULDNT_CONNECT || result == CURLE_OPERATION_TIMEDOUT);
}

}  // namespace

HttpResponse HttpClient::head(const std::string& url, const std::vector<std::string>& request_headers) {
  const CurlLibrary& lib = CurlLibrary::get();
  CURL* curl = static_cast<CURL*>(handle_);
  HttpResponse response;
  HeaderList headers(lib, request_headers);
  char error_buffer[CURL_ERROR_SIZE] = {};
  set_common_options(lib, curl, options_, url, headers, response, error_buffer);
  lib.easy_setopt(curl, CURLOPT_NOBODY, 1L);
  lib.easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  lib.easy_setopt(curl, CURLOPT_WRITEFUNCTION, &discard_body);
  finish(lib, curl, lib.easy_perform(curl), error_buffer, response);
  return response;
}

HttpResponse HttpClient::get_to_file(const std::string& url, const std::vector<std::string>& request_headers,
                                     const std::string& path, int64_t resume_from,
                                     const std::function<void(int64_t)>& on_progress) {
  const CurlLibrary& lib = CurlLibrary::get();
  CURL* curl = static_cast<CURL*>(handle_);
  HttpResponse response;
  std::vector<std::string> lines = request_headers;
  if (resume_from > 0) lines.push_back(fmt::format("Range: bytes={}-", resume_from));
  HeaderList headers(lib, lines);
  char error_buffer[CURL_ERROR_SIZE] = {};
  FileSink sink{&lib, curl, &response, path, resume_from, &on_progress};
  set_common_options(lib, curl, options_, url, headers, response, error_buffer);
  lib.easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  lib.easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  lib.easy_setopt(curl, CURLOPT_WRITEFUNCTION, &on_body);
  lib.easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  const CURLcode result = lib.easy_perform(curl);
  if (sink.fd >= 0) ::close(sink.fd);
  finish(lib, curl, result, error_buffer, response);
  if (!sink.error.empty()) response.transport_error = sink.error;
  if (result == CURLE_OK && response.status == 200 && !sink.decided) {
    // An empty file: no body byte ever arrived to create it.
    write_file_atomic(path, [](int) {});
  }
  return response;
}

std::string url_origin(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "";
  const size_t host_end = url.find_first_of("/?#", scheme_end + 3);
  return lower(url.substr(0, host_end));
}

std::string resolve_location(const std::string& base_url, const std::string& location) {
  if (location.find("://") != std::string::npos) return location;
  if (location.rfind("//", 0) == 0) return base_url.substr(0, base_url.find("://") + 1) + location;
  if (location.rfind("/", 0) == 0) return url_origin(base_url) + location;
  const size_t query = base_url.find_first_of("?#");
  const std::string path = base_url.substr(0, query);
  return path.substr(0, path.rfind('/') + 1) + location;
}

}  // namespace ssdq
