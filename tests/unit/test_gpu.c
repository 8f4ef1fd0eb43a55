/* Unit tests of the agent's GPU core (src/agent/gpu.c): which GPU a local
 * rank uses, from the environment passed in (table-driven), and NVML's
 * readings as the monitor holds them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "agent/gpu.h"
#include "common/util.h"

#define UNKNOWN CRUN__GPU_UNKNOWN
#define INDEX CRUN__GPU_INDEX
#define UUID CRUN__GPU_UUID

static const char u0[] = "GPU-5a3c2f1e-0000-4c1b-9a6f-111111111111";
static const char u1[] = "GPU-5a3c2f1e-0000-4c1b-9a6f-222222222222";

struct map_case {
	const char *what;
	const char *env;   /* crun's CUDA_VISIBLE_DEVICES=...; NULL: unset */
	const char *extra; /* extra_env's; NULL: none */
	int lr;
	bool virt;
	enum crun__gpu_ref_kind kind;
	int index;
	const char *uuid;
};

static const struct map_case map_cases[] = {
	{"unset: LOCAL_RANK", NULL, NULL, 3, false, INDEX, 3, NULL},
	{"unset, virtual: spawn.c gives lr", NULL, NULL, 2, true, INDEX, 2, NULL},
	{"indexes", "CUDA_VISIBLE_DEVICES=4,5,6,7", NULL, 1, false, INDEX, 5, NULL},
	{"indexes, virtual: the same GPU", "CUDA_VISIBLE_DEVICES=4,5,6,7", NULL, 1, true, INDEX, 5,
	 NULL},
	{"blanks around an entry", "CUDA_VISIBLE_DEVICES=2, 3 ,4", NULL, 1, false, INDEX, 3, NULL},
	{"beyond the list: no device", "CUDA_VISIBLE_DEVICES=4,5", NULL, 2, false, UNKNOWN, -1,
	 NULL},
	{"beyond the list, virtual: lr", "CUDA_VISIBLE_DEVICES=4,5", NULL, 2, true, INDEX, 2, NULL},
	{"empty list: no device", "CUDA_VISIBLE_DEVICES=", NULL, 0, false, UNKNOWN, -1, NULL},
	{"empty entry", "CUDA_VISIBLE_DEVICES=1,,3", NULL, 1, false, UNKNOWN, -1, NULL},
	{"uuid",
	 "CUDA_VISIBLE_DEVICES=GPU-5a3c2f1e-0000-4c1b-9a6f-111111111111,"
	 "GPU-5a3c2f1e-0000-4c1b-9a6f-222222222222",
	 NULL, 1, false, UUID, -1, u1},
	{"MIG instance: unknown", "CUDA_VISIBLE_DEVICES=MIG-1b2c3d4e-aaaa-bbbb-cccc-dddddddddddd",
	 NULL, 0, false, UNKNOWN, -1, NULL},
	{"MIG-GPU legacy name: unknown", "CUDA_VISIBLE_DEVICES=0,MIG-GPU-aaa/1/0", NULL, 1, false,
	 UNKNOWN, -1, NULL},
	{"negative index: unknown", "CUDA_VISIBLE_DEVICES=-1", NULL, 0, false, UNKNOWN, -1, NULL},
	{"garbage: unknown", "CUDA_VISIBLE_DEVICES=gpu0", NULL, 0, false, UNKNOWN, -1, NULL},
	{"extra_env wins", "CUDA_VISIBLE_DEVICES=0,1", "CUDA_VISIBLE_DEVICES=6,7", 0, false, INDEX,
	 6, NULL},
	{"extra_env alone", NULL, "CUDA_VISIBLE_DEVICES=6,7", 1, false, INDEX, 7, NULL},
	{"a key that only starts alike", "CUDA_VISIBLE_DEVICES_X=9", NULL, 1, false, INDEX, 1,
	 NULL},
};

static void test_map(void **state)
{
	(void)state;
	for (size_t i = 0; i < CRUN_ARRAY_SIZE(map_cases); i++) {
		const struct map_case *c = &map_cases[i];
		char *env[] = {"PATH=/usr/bin", (char *)c->env, NULL};
		char *extra[] = {(char *)c->extra, NULL};
		struct crun__gpu_ref r;

		crun__gpu_of_rank(env, c->extra ? extra : NULL, c->lr, c->virt, &r);
		if (r.kind != c->kind || (c->kind == INDEX && r.index != c->index) ||
		    (c->kind == UUID && strcmp(r.uuid, c->uuid)))
			fail_msg("%s: got kind %d index %d uuid '%s'", c->what, r.kind, r.index,
				 r.uuid);
	}
}

/* The last of two CUDA_VISIBLE_DEVICES in one array wins, and NULL arrays
 * are no environment. */
static void test_map_edges(void **state)
{
	char *env[] = {"CUDA_VISIBLE_DEVICES=1", "CUDA_VISIBLE_DEVICES=2,3", NULL};
	struct crun__gpu_ref r;

	(void)state;
	crun__gpu_of_rank(env, NULL, 1, false, &r);
	assert_int_equal(r.kind, INDEX);
	assert_int_equal(r.index, 3);
	crun__gpu_of_rank(NULL, NULL, 0, false, &r);
	assert_int_equal(r.kind, INDEX);
	assert_int_equal(r.index, 0);
	crun__gpu_of_rank(NULL, NULL, -1, false, &r);
	assert_int_equal(r.kind, UNKNOWN);
}

static void test_find(void **state)
{
	struct crun__mon_gpu gpus[2] = {{.index = 0}, {.index = 1}};
	struct crun__gpu_ref r = {.kind = INDEX, .index = 1};

	(void)state;
	snprintf(gpus[0].uuid, sizeof(gpus[0].uuid), "%s", u0);
	snprintf(gpus[1].uuid, sizeof(gpus[1].uuid), "%s", u1);
	assert_int_equal(crun__gpu_find(gpus, 2, &r), 1);
	r.index = 2;
	assert_int_equal(crun__gpu_find(gpus, 2, &r), -1);
	r = (struct crun__gpu_ref){.kind = UUID, .index = -1};
	snprintf(r.uuid, sizeof(r.uuid), "%s", u0);
	assert_int_equal(crun__gpu_find(gpus, 2, &r), 0);
	r.uuid[5] = 'x';
	assert_int_equal(crun__gpu_find(gpus, 2, &r), -1);
	r = (struct crun__gpu_ref){.kind = UNKNOWN, .index = 0};
	assert_int_equal(crun__gpu_find(gpus, 2, &r), -1);
	assert_int_equal(crun__gpu_find(NULL, 0, &r), -1);
}

static void test_reading_all(void **state)
{
	struct crun__gpu_reading r = {
		.index = 3,
		.has_uuid = true,
		.has_name = true,
		.has_util = true,
		.has_mem = true,
		.has_temp = true,
		.has_power = true,
		.has_ecc_corrected = true,
		.has_ecc_uncorrected = true,
		.util_percent = 87,
		.mem_used = 60ULL << 30,
		.mem_total = 141ULL << 30,
		.temp_c = 64,
		.power_mw = 512345,
		.ecc_corrected = 7,
		.ecc_uncorrected = 0,
	};
	struct crun__mon_gpu g;

	(void)state;
	snprintf(r.uuid, sizeof(r.uuid), "%s", u0);
	snprintf(r.name, sizeof(r.name), "NVIDIA H200");
	crun__gpu_from_reading(&r, 2, 1700000000123ULL, &g);
	assert_int_equal(g.index, 3);
	assert_string_equal(g.uuid, u0);
	assert_string_equal(g.name, "NVIDIA H200");
	assert_true(g.util > 0.8699 && g.util < 0.8701);
	assert_int_equal(g.mem_used, (int64_t)60 << 30);
	assert_int_equal(g.mem_total, (int64_t)141 << 30);
	assert_true(g.temp_c == 64.0);
	assert_true(g.power_w > 512.344 && g.power_w < 512.346);
	assert_int_equal(g.ecc_corrected, 7);
	assert_int_equal(g.ecc_uncorrected, 0);
	assert_int_equal(g.xid_total, 2);
	assert_int_equal(g.sampled_ms, 1700000000123ULL);
}

/* What NVML did not give is unknown: negative, counters UINT64_MAX. */
static void test_reading_none(void **state)
{
	struct crun__gpu_reading r = {.index = 1};
	struct crun__mon_gpu g;

	(void)state;
	crun__gpu_from_reading(&r, UINT64_MAX, 5, &g);
	assert_int_equal(g.index, 1);
	assert_string_equal(g.uuid, "");
	assert_string_equal(g.name, "");
	assert_true(g.util < 0);
	assert_true(g.mem_used < 0);
	assert_true(g.mem_total < 0);
	assert_true(g.temp_c < 0);
	assert_true(g.power_w < 0);
	assert_true(g.ecc_corrected == UINT64_MAX);
	assert_true(g.ecc_uncorrected == UINT64_MAX);
	assert_true(g.xid_total == UINT64_MAX);
	assert_int_equal(g.sampled_ms, 5);
}

/* Out of range values: a utilisation above 100 % is 1, memory beyond
 * int64 unknown, a zero power or temperature a real zero. */
static void test_reading_edges(void **state)
{
	struct crun__gpu_reading r = {
		.has_util = true,
		.util_percent = 250,
		.has_mem = true,
		.mem_used = UINT64_MAX,
		.mem_total = 1,
		.has_temp = true,
		.has_power = true,
	};
	struct crun__mon_gpu g;

	(void)state;
	crun__gpu_from_reading(&r, 0, 1, &g);
	assert_true(g.util == 1.0);
	assert_true(g.mem_used < 0 && g.mem_total < 0);
	assert_true(g.temp_c == 0.0);
	assert_true(g.power_w == 0.0);
	assert_int_equal(g.xid_total, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_map),	     cmocka_unit_test(test_map_edges),
		cmocka_unit_test(test_find),	     cmocka_unit_test(test_reading_all),
		cmocka_unit_test(test_reading_none), cmocka_unit_test(test_reading_edges),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
