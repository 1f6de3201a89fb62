#include "formats/tensor.h"

#include <cstring>

#include "formats/error.h"

namespace ssdq {

std::string shape_str(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

int64_t checked_numel(const Shape& shape, const std::string& what) {
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) fail("{}: negative dimension in shape {}", what, shape_str(shape));
    if (dim != 0 && count > kLimit / dim) fail("{}: shape {} has too many elements", what, shape_str(shape));
    count *= dim;
  }
  return count;
}

int64_t Tensor::numel() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::vector<float> Tensor::to_f32() const {
  const int64_t n = numel();
  std::vector<float> out(static_cast<size_t>(n));
  auto convert = [&](auto reader) {
    for (int64_t i = 0; i < n; ++i) out[i] = reader(i);
  };
  switch (dtype) {
    case DType::F32:
      if (n > 0) std::memcpy(out.data(), data, n * sizeof(float));  // out.data() is null when n == 0
      break;
    case DType::F64: convert([&](int64_t i) { return static_cast<float>(as<double>()[i]); }); break;
    case DType::F16: convert([&](int64_t i) { return half_to_float(as<uint16_t>()[i]); }); break;
    case DType::BF16: convert([&](int64_t i) { return bf16_to_float(as<uint16_t>()[i]); }); break;
    case DType::F8_E4M3: convert([&](int64_t i) { return fp8_e4m3_to_float(data[i]); }); break;
    case DType::F8_E5M2: convert([&](int64_t i) { return fp8_e5m2_to_float(data[i]); }); break;
    case DType::BOOL:
    case DType::U8: convert([&](int64_t i) { return static_cast<float>(data[i]); }); break;
    case DType::I8: convert([&](int64_t i) { return static_cast<float>(as<int8_t>()[i]); }); break;
    case DType::I16: convert([&](int64_t i) { return static_cast<float>(as<int16_t>()[i]); }); break;
    case DType::U16: convert([&](int64_t i) { return static_cast<float>(as<uint16_t>()[i]); }); break;
    case DType::I32: convert([&](int64_t i) { return static_cast<float>(as<int32_t>()[i]); }); break;
    case DType::U32: convert([&](int64_t i) { return static_cast<float>(as<uint32_t>()[i]); }); break;
    case DType::I64: convert([&](int64_t i) { return static_cast<float>(as<int64_t>()[i]); }); break;
    case DType::U64: convert([&](int64_t i) { return static_cast<float>(as<uint64_t>()[i]); }); break;
  }
  return out;
}

Tensor Tensor::own(DType dtype, Shape shape, std::vector<uint8_t> bytes) {
  auto storage = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  if (storage->size() != t.nbytes())
    fail("internal: tensor of shape {} needs {} bytes, got {}", shape_str(t.shape), t.nbytes(), storage->size());
  t.data = storage->data();
  t.keepalive = storage;
  return t;
}

namespace {
template <typename T>
Tensor own_values(DType dtype, Shape shape, const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return Tensor::own(dtype, std::move(shape), std::move(bytes));
}
}  // namespace

Tensor Tensor::from_f32(Shape shape, const std::vector<float>& values) { return own_values(DType::F32, std::move(shape), values); }
Tensor Tensor::from_i32(Shape shape, const std::vector<int32_t>& values) { return own_values(DType::I32, std::move(shape), values); }
Tensor Tensor::from_f64(Shape shape, const std::vector<double>& values) { return own_values(DType::F64, std::move(shape), values); }
Tensor Tensor::from_i64(Shape shape, const std::vector<int64_t>& values) { return own_values(DType::I64, std::move(shape), values); }

}  // namespace ssdq
