-- wrk script for benches/failover/run.sh: counts requests sent, responses received and every
-- response whose status is not 2xx (by status), over all threads. wrk itself counts only
-- socket errors and "Non-2xx or 3xx"; it does not report a request still unanswered when the
-- run ends, which sent - received shows. Every request is a GET (idempotent).
--
-- done() prints one line: "failover-count sent=N received=N non2xx=N statuses=CODE:N,..."
-- wrk calls request() once per thread before it connects (that request is never sent), so
-- sent leaves those out; sent - received is then what was in flight when wrk stopped.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  sent = 0
  received = 0
  non2xx = 0
  statuses = ""
  by_status = {}
end

function request()
  sent = sent + 1
  return wrk.format()
end

function response(status, headers, body)
  received = received + 1
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
    by_status[status] = (by_status[status] or 0) + 1
    local parts = {}
    for code, n in pairs(by_status) do
      table.insert(parts, code .. ":" .. n)
    end
    table.sort(parts)
    statuses = table.concat(parts, ",")
  end
end

function done(summary, latency, requests)
  local s, r, n, st = 0, 0, 0, {}
  for _, t in ipairs(threads) do
    s = s + t:get("sent") - 1
    r = r + t:get("received")
    n = n + t:get("non2xx")
    local v = t:get("statuses")
    if v ~= nil and v ~= "" then
      table.insert(st, v)
    end
  end
  local e = summary.errors
  io.write(string.format(
    "failover-count sent=%d received=%d non2xx=%d statuses=%s connect_errors=%d read_errors=%d write_errors=%d timeouts=%d max_latency_ms=%.1f\n",
    s, r, n, table.concat(st, ","), e.connect, e.read, e.write, e.timeout, latency.max / 1000))
end
