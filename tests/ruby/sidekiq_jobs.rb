# Sidekiq jobs for the Sidekiq-on-WeTask test. Each job records its result in the `results`
# hash; FlakyJob fails on its first attempt and succeeds on Sidekiq's retry.
require "sidekiq"

Sidekiq.configure_server do |config|
  # Look for due retries and scheduled jobs about every second from the start (not every
  # 5 s after a 10-15 s initial wait).
  config.average_scheduled_poll_interval = 1
  Sidekiq.options[:poll_interval_average] = 1
end

class AddJob
  include Sidekiq::Worker

  def perform(a, b)
    Sidekiq.redis { |r| r.hset("results", "add:#{a}", a + b) }
  end
end

class FlakyJob
  include Sidekiq::Worker
  sidekiq_options retry: 3
  sidekiq_retry_in { |_count, _exception| 1 }

  def perform(n)
    attempts = Sidekiq.redis { |r| r.incr("flaky:attempts") }
    raise "first attempt fails" if attempts == 1
    Sidekiq.redis { |r| r.hset("results", "flaky", n * 10) }
  end
end

class ScheduledJob
  include Sidekiq::Worker

  def perform(at)
    Sidekiq.redis { |r| r.hset("results", "scheduled", Time.now.to_f - at) }
  end
end
