// Row helpers shared by the nn kernels (softmax, norms, losses, attention).
// WG invocations per workgroup. With PER_THREAD one invocation handles a
// whole row (TEAM 1, no barriers); otherwise a workgroup handles a row (TEAM
// WG) and team reductions go through subgroup ops plus shared memory.
// FOR_ROWS is a grid-stride loop over rows, uniform across the workgroup.

#define NEG_INF uintBitsToFloat(0xff800000u)
#define POS_INF uintBitsToFloat(0x7f800000u)

#ifdef PER_THREAD
#define TEAM 1u
#define LANE 0u
#define FOR_ROWS(row, count) for (uint row = gl_GlobalInvocationID.x; row < (count); row += gl_NumWorkGroups.x * uint(WG))
float teamSum(float v) { return v; }
float teamMax(float v) { return v; }
#else
#define TEAM uint(WG)
#define LANE gl_LocalInvocationID.x
#define FOR_ROWS(row, count) for (uint row = gl_WorkGroupID.x; row < (count); row += gl_NumWorkGroups.x)
shared float team_s[WG];
float teamSum(float v) {
  v = subgroupAdd(v);
  if (subgroupElect()) team_s[gl_SubgroupID] = v;
  barrier();
  float t = 0.0;
  for (uint i = 0u; i < gl_NumSubgroups; ++i) t += team_s[i];
  barrier();
  return t;
}
float teamMax(float v) {
  v = subgroupMax(v);
  if (subgroupElect()) team_s[gl_SubgroupID] = v;
  barrier();
  float t = NEG_INF;
  for (uint i = 0u; i < gl_NumSubgroups; ++i) t = max(t, team_s[i]);
  barrier();
  return t;
}
#endif
