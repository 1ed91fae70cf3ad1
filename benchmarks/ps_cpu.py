import sys, time, tempfile, shutil
from pylog.cluster import Cluster
N=int(sys.argv[1]); M=int(sys.argv[2]); R=int(sys.argv[3]) if len(sys.argv)>3 else 3
d=tempfile.mkdtemp()
c=Cluster(d, brokers=3)
c.create_topic("t", partitions=N, replication_factor=3, min_insync_replicas=2)
p=c.producer(acks="all", linger_ms=5)
v=b"x"*100
res={}
for rep in range(R):
  for label, parts in (("one",[0]),("spread",list(range(N)))):
    for f in [p.send("t", v, partition=parts[i % len(parts)]) for i in range(2000)]: f.result(timeout=120)
    b0,r0=p.batches_sent,getattr(p,"produce_requests",0)
    t0=time.perf_counter(); c0=time.process_time()
    futs=[p.send("t", v, partition=parts[i % len(parts)]) for i in range(M)]
    for f in futs: f.result(timeout=300)
    t2=time.perf_counter(); c2=time.process_time()
    res.setdefault(label,[]).append(((c2-c0)/M*1e6, M/(t2-t0), p.batches_sent-b0, getattr(p,"produce_requests",0)-r0))
for k,v in res.items():
    best=min(v)
    print(k, "best CPU us/rec %.2f"%best[0], "rates", ["%d"%x[1] for x in v], "batches/reqs", best[2], best[3])
print("ratio by CPU %.2f"%(min(res['one'])[0]/min(res['spread'])[0]))
p.close(); t=time.perf_counter(); c.close(); print("close %.2f s" % (time.perf_counter()-t)); shutil.rmtree(d)
