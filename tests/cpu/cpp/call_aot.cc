// Calls one CPU AOT kernel of the packaged library the way MindSpore does, with every output
// buffer poisoned first (all bytes 0xFF: NaN in float16, bfloat16 and float32), so a test sees any
// element the kernel forgets to write. MindSpore hands kernels reused memory, so an unwritten
// element is garbage there, and nothing in Python can make it visible reliably.
//
//   call_aot <library.so> <OpType> <spec file>
//
// Spec lines (whitespace separated; tensors in kernel parameter order, inputs then outputs):
//   attr str <name> <value>        attr int <name> <value>
//   attr float <name> <value>      attr bool <name> <0|1>
//   in  <dtype> <rank> <dims...> <raw file to read>
//   out <dtype> <rank> <dims...> <raw file to write>
// Exit status 0 when the kernel returned 0; a thrown error is printed as "error: <what>", exit 3.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cpu/aot.h"

namespace {

using Kernel = int (*)(int, void**, int*, int64_t**, const char**, void*, void*);

class Extra : public mindspore::AotExtra {
 public:
  std::map<std::string, std::string> attrs;

  bool HasAttr(std::string name) override { return attrs.count(name) > 0; }
  bool GetAttrBool(std::string name) override { return attrs.at(name) == "1"; }
  int64_t GetAttrInt(std::string name) override { return std::stoll(attrs.at(name)); }
  float GetAttrFloat(std::string name) override { return std::stof(attrs.at(name)); }
  std::string GetAttrStr(std::string name) override { return attrs.at(name); }
  std::vector<int64_t> GetAttrIntVec(std::string) override { return {}; }
  std::vector<float> GetAttrFloatVec(std::string) override { return {}; }
  std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string) override { return {}; }
  std::vector<std::vector<float>> GetAttrFloat2DVec(std::string) override { return {}; }
};

struct Tensor {
  bool output = false;
  std::string dtype, file;
  std::vector<int64_t> shape;
  std::vector<char> data;
};

size_t item_size(const std::string& dtype) {
  if (dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "int64" || dtype == "float64") return 8;
  return 4;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: call_aot <library.so> <OpType> <spec file>\n";
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    std::cerr << dlerror() << "\n";
    return 2;
  }
  auto kernel = reinterpret_cast<Kernel>(dlsym(lib, argv[2]));
  if (!kernel) {
    std::cerr << "no symbol " << argv[2] << "\n";
    return 2;
  }
  Extra extra;
  std::vector<Tensor> tensors;
  std::ifstream spec(argv[3]);
  std::string kind;
  while (spec >> kind) {
    if (kind == "attr") {
      std::string type, name, value;
      spec >> type >> name >> value;
      extra.attrs[name] = value;
      continue;
    }
    Tensor t;
    t.output = kind == "out";
    size_t rank = 0;
    spec >> t.dtype >> rank;
    t.shape.resize(rank);
    int64_t numel = 1;
    for (auto& d : t.shape) {
      spec >> d;
      numel *= d;
    }
    spec >> t.file;
    t.data.assign(static_cast<size_t>(numel) * item_size(t.dtype), static_cast<char>(0xFF));
    if (!t.output) {
      std::ifstream in(t.file, std::ios::binary);
      in.read(t.data.data(), static_cast<std::streamsize>(t.data.size()));
      if (!in) {
        std::cerr << "cannot read " << t.file << "\n";
        return 2;
      }
    }
    tensors.push_back(std::move(t));
  }
  std::vector<void*> params;
  std::vector<int> ndims;
  std::vector<int64_t*> shapes;
  std::vector<const char*> dtypes;
  for (auto& t : tensors) {
    params.push_back(t.data.data());
    ndims.push_back(static_cast<int>(t.shape.size()));
    shapes.push_back(t.shape.data());
    dtypes.push_back(t.dtype.c_str());
  }
  int rc = 0;
  try {
    rc = kernel(static_cast<int>(tensors.size()), params.data(), ndims.data(), shapes.data(), dtypes.data(), nullptr,
                &extra);
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << "\n";
    return 3;
  }
  for (const auto& t : tensors) {
    if (!t.output) continue;
    std::ofstream out(t.file, std::ios::binary);
    out.write(t.data.data(), static_cast<std::streamsize>(t.data.size()));
  }
  return rc == 0 ? 0 : 1;
}
