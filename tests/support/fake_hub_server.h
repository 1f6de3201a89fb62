// A fake Hugging Face hub on 127.0.0.1 for the hub cache tests: a thread answering
// HEAD/GET /<org>/<name>/resolve/<revision>/<file> the way huggingface.co does (X-Repo-Commit,
// ETag / X-Linked-Etag / X-Linked-Size, 302 to a storage host for LFS files, 404 with
// X-Error-Code, 401 for private repositories without the token, 307 for a renamed repository),
// and a second port standing in for the storage host (Range requests, truncated or corrupted
// transfers on demand).
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ssdq::testing {

struct FakeRepo {
  std::string commit;                        // 40 hex
  std::map<std::string, std::string> files;  // name -> bytes
  std::string required_token;                // empty: public
};

struct LoggedRequest {
  std::string method, path, range, authorization;
  int port = 0;
};

class FakeHubServer {
 public:
  FakeHubServer();
  ~FakeHubServer();
  FakeHubServer(const FakeHubServer&) = delete;
  FakeHubServer& operator=(const FakeHubServer&) = delete;

  std::string endpoint() const;  // http://127.0.0.1:<hub port>
  int hub_port() const { return hub_port_; }
  int storage_port() const { return storage_port_; }

  void add_repo(const std::string& repo_id, FakeRepo repo);
  // Requests for /<from>/resolve/... answer 307 to /<to>/resolve/... (a renamed repository).
  void add_rename(const std::string& from, const std::string& to);

  // The next `count` storage GETs send the headers of the whole answer, then half the body, and
  // close the connection.
  void truncate_next_storage_gets(int count) { truncate_storage_gets_ = count; }
  // Storage GETs send bytes of the right length that do not match the ETag.
  void corrupt_storage(bool on) { corrupt_storage_ = on; }

  std::vector<LoggedRequest> requests() const;
  void clear_requests();

 private:
  void serve(int listen_fd, int port);
  void answer(int fd, int port);
  std::string answer_resolve(const std::string& method, const std::string& path,
                             const std::map<std::string, std::string>& headers);
  std::string answer_storage(const std::string& method, const std::string& path,
                             const std::map<std::string, std::string>& headers, size_t& body_cut);

  int hub_fd_ = -1, storage_fd_ = -1;
  int hub_port_ = 0, storage_port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> truncate_storage_gets_{0};
  std::atomic<bool> corrupt_storage_{false};
  mutable std::mutex mutex_;
  std::map<std::string, FakeRepo> repos_;
  std::map<std::string, std::string> renames_;
  std::map<std::string, std::string> blobs_;  // sha256 -> bytes, served by the storage port
  std::vector<LoggedRequest> requests_;
  std::thread hub_thread_, storage_thread_;
};

}  // namespace ssdq::testing
