# Pushes 100 AddJobs and a ScheduledJob (perform_in 2 s), then exits: the migration test
# enqueues on a redis-server, moves it to WeTask with REPLICAOF, and runs the jobs there.
# REDIS_URL names the server.
require_relative "sidekiq_jobs"

100.times { |i| AddJob.perform_async(i, 1000) }
ScheduledJob.perform_in(2, Time.now.to_f)
puts "enqueued"
