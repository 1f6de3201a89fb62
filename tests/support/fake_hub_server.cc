#include "tests/support/fake_hub_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <stdexcept>

#include "formats/digest.h"

namespace ssdq::testing {
namespace {

int listen_on_loopback(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  const int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(fd, 16) != 0)
    throw std::runtime_error("bind/listen on 127.0.0.1 failed");
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  port = ntohs(address.sin_port);
  return fd;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string percent_decode(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string sha256_of(const std::string& bytes) {
  Sha256 hash;
  hash.update(bytes.data(), bytes.size());
  return hash.hex_digest();
}

std::string git_blob_sha1_of(const std::string& bytes) {
  Sha1 hash;
  const std::string header = "blob " + std::to_string(bytes.size());
  hash.update(header.c_str(), header.size() + 1);
  hash.update(bytes.data(), bytes.size());
  return hash.hex_digest();
}

bool is_lfs(const std::string& file) {
  auto ends_with = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return file.size() >= n && file.compare(file.size() - n, n, suffix) == 0;
  };
  return ends_with(".safetensors") || ends_with(".bin");
}

std::string response(int status, const char* reason, const std::vector<std::string>& headers,
                     const std::string& body, size_t content_length) {
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", status, reason);
  for (const std::string& header : headers) out += header + "\r\n";
  out += fmt::format("Content-Length: {}\r\nConnection: close\r\n\r\n", content_length);
  return out + body;
}

void send_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t sent = ::send(fd, data, size, MSG_NOSIGNAL);
    if (sent <= 0) return;
    data += sent;
    size -= static_cast<size_t>(sent);
  }
}

}  // namespace

FakeHubServer::FakeHubServer() {
  hub_fd_ = listen_on_loopback(hub_port_);
  storage_fd_ = listen_on_loopback(storage_port_);
  hub_thread_ = std::thread([this] { serve(hub_fd_, hub_port_); });
  storage_thread_ = std::thread([this] { serve(storage_fd_, storage_port_); });
}

FakeHubServer::~FakeHubServer() {
  stopping_ = true;
  ::shutdown(hub_fd_, SHUT_RDWR);
  ::shutdown(storage_fd_, SHUT_RDWR);
  hub_thread_.join();
  storage_thread_.join();
  ::close(hub_fd_);
  ::close(storage_fd_);
}

std::string FakeHubServer::endpoint() const { return fmt::format("http://127.0.0.1:{}", hub_port_); }

void FakeHubServer::add_repo(const std::string& repo_id, FakeRepo repo) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [name, bytes] : repo.files)
    if (is_lfs(name)) blobs_[sha256_of(bytes)] = bytes;
  repos_[repo_id] = std::move(repo);
}

void FakeHubServer::add_rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mutex_);
  renames_[from] = to;
}

std::vector<LoggedRequest> FakeHubServer::requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return requests_;
}

void FakeHubServer::clear_requests() {
  std::lock_guard<std::mutex> lock(mutex_);
  requests_.clear();
}

void FakeHubServer::serve(int listen_fd, int port) {
  while (!stopping_) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_) return;
      continue;
    }
    answer(fd, port);
    ::close(fd);
  }
}

void FakeHubServer::answer(int fd, int port) {
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string request;
  char buffer[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536) {
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    if (got <= 0) return;
    request.append(buffer, static_cast<size_t>(got));
  }
  const size_t line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  const size_t space1 = line.find(' '), space2 = line.find(' ', space1 + 1);
  if (space1 == std::string::npos || space2 == std::string::npos) return;
  const std::string method = line.substr(0, space1);
  const std::string path = line.substr(space1 + 1, space2 - space1 - 1);
  std::map<std::string, std::string> headers;
  for (size_t at = line_end + 2; at < request.size();) {
    const size_t end = request.find("\r\n", at);
    if (end == std::string::npos || end == at) break;
    const std::string header = request.substr(at, end - at);
    const size_t colon = header.find(':');
    if (colon != std::string::npos)
      headers[lower(header.substr(0, colon))] = header.substr(header.find_first_not_of(' ', colon + 1));
    at = end + 2;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    requests_.push_back({method, path, headers["range"], headers["authorization"], port});
  }
  size_t cut = std::string::npos;
  const std::string reply =
      port == storage_port_ ? answer_storage(method, path, headers, cut) : answer_resolve(method, path, headers);
  send_all(fd, reply.data(), std::min(cut, reply.size()));
  ::shutdown(fd, SHUT_WR);
}

std::string FakeHubServer::answer_resolve(const std::string& method, const std::string& path,
                                          const std::map<std::string, std::string>& headers) {
  // /<org>/<name>/resolve/<revision>/<file>
  const size_t resolve = path.find("/resolve/");
  const size_t revision_end = resolve == std::string::npos ? std::string::npos : path.find('/', resolve + 9);
  if (path.empty() || path[0] != '/' || revision_end == std::string::npos)
    return response(400, "Bad Request", {}, "", 0);
  const std::string repo_id = path.substr(1, resolve - 1);
  const std::string revision = percent_decode(path.substr(resolve + 9, revision_end - resolve - 9));
  const std::string file = percent_decode(path.substr(revision_end + 1));

  std::lock_guard<std::mutex> lock(mutex_);
  if (auto rename = renames_.find(repo_id); rename != renames_.end())
    return response(307, "Temporary Redirect", {"Location: /" + rename->second + path.substr(resolve)}, "", 0);
  const auto found = repos_.find(repo_id);
  const bool authorized = found != repos_.end() && (found->second.required_token.empty() ||
                                                    (headers.count("authorization") &&
                                                     headers.at("authorization") == "Bearer " + found->second.required_token));
  if (!authorized)  // the hub answers 401 both for a missing repository and for a private one
    return response(401, "Unauthorized",
                    {"X-Error-Code: RepoNotFound", "X-Error-Message: Repository not found"}, "", 0);
  const FakeRepo& repo = found->second;
  if (revision != "main" && revision != repo.commit)
    return response(404, "Not Found", {"X-Error-Code: RevisionNotFound", "X-Error-Message: Invalid rev id: " + revision},
                    "", 0);
  const std::string commit_header = "X-Repo-Commit: " + repo.commit;
  const auto entry = repo.files.find(file);
  if (entry == repo.files.end())
    return response(404, "Not Found",
                    {commit_header, "X-Error-Code: EntryNotFound", "X-Error-Message: Entry not found"}, "", 0);
  const std::string& bytes = entry->second;
  if (is_lfs(file)) {
    const std::string sha256 = sha256_of(bytes);
    return response(302, "Found",
                    {commit_header, fmt::format("Location: http://127.0.0.1:{}/blobs/{}?download=true", storage_port_, sha256),
                     fmt::format("X-Linked-Etag: \"{}\"", sha256), fmt::format("X-Linked-Size: {}", bytes.size()),
                     "ETag: \"0123456789abcdef0123456789abcdef01234567\""},
                    "", 0);
  }
  // Small files come straight from the hub; it marks some ETags weak.
  const std::string etag = fmt::format(file == "tokenizer_config.json" ? "ETag: W/\"{}\"" : "ETag: \"{}\"",
                                       git_blob_sha1_of(bytes));
  return response(200, "OK", {commit_header, etag}, method == "GET" ? bytes : "", bytes.size());
}

std::string FakeHubServer::answer_storage(const std::string& method, const std::string& path,
                                          const std::map<std::string, std::string>& headers, size_t& body_cut) {
  const std::string prefix = "/blobs/";
  const std::string sha = path.rfind(prefix, 0) == 0 ? path.substr(prefix.size(), path.find('?') - prefix.size()) : "";
  std::string bytes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = blobs_.find(sha);
    if (found == blobs_.end()) return response(404, "Not Found", {}, "", 0);
    bytes = found->second;
  }
  if (corrupt_storage_ && !bytes.empty()) bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
  size_t start = 0;
  int status = 200;
  std::vector<std::string> extra = {"Accept-Ranges: bytes"};
  if (auto range = headers.find("range"); range != headers.end() && range->second.rfind("bytes=", 0) == 0) {
    start = std::stoull(range->second.substr(6));
    if (start >= bytes.size())
      return response(416, "Range Not Satisfiable", {fmt::format("Content-Range: bytes */{}", bytes.size())}, "", 0);
    status = 206;
    extra.push_back(fmt::format("Content-Range: bytes {}-{}/{}", start, bytes.size() - 1, bytes.size()));
  }
  const std::string body = bytes.substr(start);
  const std::string reply = response(status, status == 206 ? "Partial Content" : "OK", extra,
                                     method == "GET" ? body : "", body.size());
  if (method == "GET" && truncate_storage_gets_ > 0) {
    --truncate_storage_gets_;
    body_cut = reply.size() - body.size() + body.size() / 2;
  }
  return reply;
}

}  // namespace ssdq::testing
