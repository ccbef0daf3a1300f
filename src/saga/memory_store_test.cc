// The in-memory saga store the engine's tests run on keeps the store contract.

#include "saga/testing/memory_store.h"

#include "saga/testing/store_contract.h"

namespace fp::saga::testing {
namespace {

struct MemoryStoreFixture {
  SagaStore& store() { return store_; }
  MemoryStore store_;
};

INSTANTIATE_TYPED_TEST_SUITE_P(Memory, SagaStoreContract, MemoryStoreFixture);

}  // namespace
}  // namespace fp::saga::testing
