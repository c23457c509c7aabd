#include "server/chunk_queue.h"

#include <thread>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(ChunkQueueTest, ChunksComeBeforeTheFinalStatus) {
  ChunkQueue queue;
  EngineChunk chunk;
  absl::Status status;
  EXPECT_EQ(queue.Pop(absl::Milliseconds(1), &chunk, &status), ChunkQueue::Next::kTimeout);
  EngineChunk a;
  a.token_ids = {1};
  queue.Push(a);
  queue.Finish(absl::UnavailableError("pool lost"));
  queue.Finish(absl::OkStatus());  // only the first Finish counts
  ASSERT_EQ(queue.Pop(absl::ZeroDuration(), &chunk, &status), ChunkQueue::Next::kChunk);
  EXPECT_EQ(chunk.token_ids, (std::vector<int32_t>{1}));
  ASSERT_EQ(queue.Pop(absl::ZeroDuration(), &chunk, &status), ChunkQueue::Next::kDone);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
}

TEST(ChunkQueueTest, PopWakesWhenAnotherThreadPushes) {
  ChunkQueue queue;
  std::thread producer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    queue.Finish(absl::OkStatus());
  });
  EngineChunk chunk;
  absl::Status status = absl::UnknownError("unset");
  EXPECT_EQ(queue.Pop(absl::Seconds(30), &chunk, &status), ChunkQueue::Next::kDone);
  EXPECT_TRUE(status.ok());
  producer.join();
}

TEST(ChunkQueueTest, SeveralStreamsEndOnceAllFinishOrAtTheFirstFailure) {
  ChunkQueue queue(3);
  EngineChunk chunk;
  absl::Status status;
  EngineChunk a;
  a.index = 2;
  queue.Push(a);
  queue.Finish(absl::OkStatus());
  queue.Finish(absl::OkStatus());
  ASSERT_EQ(queue.Pop(absl::ZeroDuration(), &chunk, &status), ChunkQueue::Next::kChunk);
  EXPECT_EQ(chunk.index, 2);
  EXPECT_EQ(queue.Pop(absl::Milliseconds(1), &chunk, &status), ChunkQueue::Next::kTimeout);
  queue.Finish(absl::OkStatus());
  ASSERT_EQ(queue.Pop(absl::ZeroDuration(), &chunk, &status), ChunkQueue::Next::kDone);
  EXPECT_TRUE(status.ok());

  ChunkQueue failing(3);
  failing.Finish(absl::OkStatus());
  failing.Finish(absl::UnavailableError("pool lost"));  // the call ends here
  failing.Finish(absl::OkStatus());
  ASSERT_EQ(failing.Pop(absl::ZeroDuration(), &chunk, &status), ChunkQueue::Next::kDone);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tpserve
