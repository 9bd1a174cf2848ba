/* Kernel timeline of a process through CUPTI's activity API, for the launch-gap figures of
 * bench/trace/trace_table.py (issue 28, item 3). Preloaded into a run:
 *
 *   ET_TRACE_OUT=/tmp/k.tsv LD_PRELOAD=libcupti_trace.so et_cuda_run ...
 *
 * writes one line per kernel (CUDA-graph nodes included), per memory copy and set, and per driver
 * API call, in the order CUPTI delivers them:
 *   start_ns  end_ns  graph_id  graph_node_id  stream_id  name
 * A copy is named "memcpy <kind> <bytes>", a set "memset <bytes>", a driver call "api <function>"
 * (its stream_id column is the calling thread's id; graph and node 0). The GPU's records and the
 * host's are on CUPTI's one clock, so the host's share of the time between two graph replays can
 * be read off. Concurrent-kernel records do not serialise the kernels (PDL overlaps stay visible). Built on
 * this machine against the headers of the nvidia-cuda-cupti wheel (bench/trace/build.sh); the
 * GPU machine's torch install brings libcupti.so.13. */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

#define BUF_SIZE (8u << 20)
static FILE* out;

static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = (uint8_t*)aligned_alloc(8, BUF_SIZE);
  *size = *buffer ? BUF_SIZE : 0;
  *max_records = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                               size_t valid) {
  (void)ctx;
  (void)stream;
  (void)size;
  CUpti_Activity* rec = NULL;
  while (out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const CUpti_ActivityKernel10* k = (const CUpti_ActivityKernel10*)rec;
      fprintf(out, "%llu\t%llu\t%u\t%llu\t%u\t%s\n", (unsigned long long)k->start,
              (unsigned long long)k->end, k->graphId, (unsigned long long)k->graphNodeId,
              k->streamId, k->name ? k->name : "?");
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const CUpti_ActivityMemcpy6* m = (const CUpti_ActivityMemcpy6*)rec;
      static const char* kinds[] = {"?", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"};
      const char* kind = m->copyKind < sizeof(kinds) / sizeof(kinds[0]) ? kinds[m->copyKind] : "?";
      fprintf(out, "%llu\t%llu\t%u\t%llu\t%u\tmemcpy %s %llu\n", (unsigned long long)m->start,
              (unsigned long long)m->end, m->graphId, (unsigned long long)m->graphNodeId, m->streamId,
              kind, (unsigned long long)m->bytes);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const CUpti_ActivityMemset4* m = (const CUpti_ActivityMemset4*)rec;
      fprintf(out, "%llu\t%llu\t%u\t%llu\t%u\tmemset %llu\n", (unsigned long long)m->start,
              (unsigned long long)m->end, m->graphId, (unsigned long long)m->graphNodeId, m->streamId,
              (unsigned long long)m->bytes);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
      const CUpti_ActivityAPI* a = (const CUpti_ActivityAPI*)rec;
      const char* name = NULL;
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, a->cbid, &name) != CUPTI_SUCCESS || !name)
        name = "?";
      fprintf(out, "%llu\t%llu\t0\t0\t%u\tapi %s\n", (unsigned long long)a->start,
              (unsigned long long)a->end, a->threadId, name);
    }
  }
  free(buffer);
}

__attribute__((constructor)) static void start(void) {
  const char* path = getenv("ET_TRACE_OUT");
  if (!path) return;
  out = fopen(path, "w");
  if (!out) {
    fprintf(stderr, "cupti_trace: cannot write %s\n", path);
    return;
  }
  if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) != CUPTI_SUCCESS) {
    fprintf(stderr, "cupti_trace: CUPTI refused the activity tracing\n");
    fclose(out);
    out = NULL;
  }
}

__attribute__((destructor)) static void stop(void) {
  if (!out) return;
  cuptiActivityFlushAll(1);
  fclose(out);
  out = NULL;
}
