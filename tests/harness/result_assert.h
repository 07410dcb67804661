// Assertions on acqfs's Result<T> and Status (common/error.h) for tests:
// ASSERT_OK / EXPECT_OK (ok, else the error's message), EXPECT_ERRNO (failed
// with that errno) and ASSERT_OK_AND_ASSIGN(lhs, expr) (`lhs = value of
// expr`, asserting that it is ok; lhs may declare, e.g. `auto x`).
// Templates on .ok(), .error().Message(), .err() and .value(), so this
// header needs no acqfs library.
// Thread-safety: gtest assertions; the usual gtest rules.
#ifndef ACQFS_TESTS_HARNESS_RESULT_ASSERT_H_
#define ACQFS_TESTS_HARNESS_RESULT_ASSERT_H_

#include <gtest/gtest.h>

#include <utility>

// Asserts that a Result/Status is ok, printing the error otherwise.
#define ASSERT_OK(expr)                                        \
  do {                                                         \
    const auto& acqfs_assert_r_ = (expr);                      \
    ASSERT_TRUE(acqfs_assert_r_.ok())                          \
        << #expr << ": " << acqfs_assert_r_.error().Message(); \
  } while (0)
#define EXPECT_OK(expr)                                        \
  do {                                                         \
    const auto& acqfs_expect_r_ = (expr);                      \
    EXPECT_TRUE(acqfs_expect_r_.ok())                          \
        << #expr << ": " << acqfs_expect_r_.error().Message(); \
  } while (0)
// Expects that a Result/Status failed with errno `e`.
#define EXPECT_ERRNO(e, expr)                                    \
  do {                                                           \
    const auto& acqfs_expect_r_ = (expr);                        \
    EXPECT_FALSE(acqfs_expect_r_.ok()) << #expr << " succeeded"; \
    EXPECT_EQ(acqfs_expect_r_.err(), (e)) << #expr;              \
  } while (0)

#define ACQFS_TEST_CONCAT2(a, b) a##b
#define ACQFS_TEST_CONCAT(a, b) ACQFS_TEST_CONCAT2(a, b)
// `lhs = value of expr`, asserting that expr is ok: ASSERT_OK_AND_ASSIGN(
// auto x, F()) declares x, ASSERT_OK_AND_ASSIGN(x_, F()) assigns. One per
// line (the temporary is named after __LINE__).
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ACQFS_TEST_ASSIGN_IMPL(ACQFS_TEST_CONCAT(acqfs_r_, __LINE__), lhs, expr)
#define ACQFS_TEST_ASSIGN_IMPL(tmp, lhs, expr)                     \
  auto tmp = (expr);                                               \
  ASSERT_TRUE(tmp.ok()) << #expr << ": " << tmp.error().Message(); \
  lhs = std::move(tmp).value()

#endif  // ACQFS_TESTS_HARNESS_RESULT_ASSERT_H_
