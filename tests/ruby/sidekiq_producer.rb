# Pushes 100 AddJobs, a FlakyJob and a ScheduledJob (perform_in 2 s), waits for every result
# and prints them as JSON. REDIS_URL names the server.
require "json"
require_relative "sidekiq_jobs"

100.times { |i| AddJob.perform_async(i, 1000) }
FlakyJob.perform_async(7)
ScheduledJob.perform_in(2, Time.now.to_f)

deadline = Time.now + 60
results = {}
loop do
  results = Sidekiq.redis { |r| r.hgetall("results") }
  break if results.size >= 102 || Time.now > deadline
  sleep 0.2
end
retries = Sidekiq.redis { |r| r.get("flaky:attempts") }
puts JSON.generate({ "results" => results, "flaky_attempts" => retries.to_i })
