{
  "targets": [
    {
      "target_name": "content_runs",
      "sources": ["native/content-runs.cc"],
      "cflags_cc": ["-O2", "-std=c++17"]
    }
  ]
}
