#include "runtime/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "formats/error.h"

namespace ssdq {
namespace {

constexpr int kNcclFloat32 = 7;  // ncclDataType_t
constexpr int kNcclSum = 0;      // ncclRedOp_t

}  // namespace

const NcclLibrary* NcclLibrary::load(std::string* error) {
  static std::string load_error;
  static const NcclLibrary* const library = [&]() -> const NcclLibrary* {
    std::vector<std::string> names;
    if (const char* env = std::getenv("SSDQ_NCCL_LIBRARY"); env && *env) names.push_back(env);
    names.push_back("libnccl.so.2");
    names.push_back("libnccl.so");
    std::string tried;
    void* handle = nullptr;
    std::string path;
    for (const std::string& name : names) {
      handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle) {
        path = name;
        break;
      }
      const char* why = dlerror();
      tried += fmt::format("{}{} ({})", tried.empty() ? "" : "; ", name, why ? why : "not found");
    }
    if (!handle) {
      load_error = fmt::format("NCCL could not be loaded: {}; install NCCL 2.18 or newer, or set SSDQ_NCCL_LIBRARY", tried);
      return nullptr;
    }
    auto lib = std::unique_ptr<NcclLibrary>(new NcclLibrary());
    lib->path = path;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (!fn && load_error.empty()) load_error = fmt::format("NCCL library {} has no symbol {}", path, name);
    };
    sym(lib->get_version_, "ncclGetVersion");
    sym(lib->get_unique_id_, "ncclGetUniqueId");
    sym(lib->comm_init_rank_, "ncclCommInitRank");
    sym(lib->comm_destroy_, "ncclCommDestroy");
    sym(lib->all_reduce_, "ncclAllReduce");
    sym(lib->all_gather_, "ncclAllGather");
    sym(lib->get_error_string_, "ncclGetErrorString");
    if (!load_error.empty()) return nullptr;
    lib->get_version_(&lib->version);
    return lib.release();
  }();
  if (!library && error) *error = load_error;
  return library;
}

const NcclLibrary& NcclLibrary::get() {
  std::string error;
  const NcclLibrary* library = load(&error);
  if (!library) fail("{}", error);
  return *library;
}

bool NcclLibrary::available(std::string* why) { return load(why) != nullptr; }

std::string NcclLibrary::version_string() const {
  return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

void NcclLibrary::check(Result result, const char* what) const {
  if (result != 0) fail("NCCL {}: {} (error {})", what, get_error_string_(result), result);
}

NcclUniqueId NcclLibrary::unique_id() const {
  NcclUniqueId id{};
  check(get_unique_id_(&id), "ncclGetUniqueId");
  return id;
}

NcclComm NcclLibrary::init_rank(int ranks, const NcclUniqueId& id, int rank) const {
  NcclComm comm = nullptr;
  check(comm_init_rank_(&comm, ranks, id, rank), "ncclCommInitRank");
  return comm;
}

void NcclLibrary::destroy(NcclComm comm) const {
  if (comm) comm_destroy_(comm);
}

void NcclLibrary::all_reduce_sum(float* data, size_t count, NcclComm comm, cudaStream_t stream) const {
  check(all_reduce_(data, data, count, kNcclFloat32, kNcclSum, comm, stream), "ncclAllReduce");
}

void NcclLibrary::all_gather(const float* send, float* recv, size_t count, NcclComm comm, cudaStream_t stream) const {
  check(all_gather_(send, recv, count, kNcclFloat32, comm, stream), "ncclAllGather");
}

}  // namespace ssdq
