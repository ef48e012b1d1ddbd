// The entry object: `new Strata({gateway})` gives admins, producers and
// consumers that share its options, as kafkajs' `new Kafka({brokers})`.

import { Admin } from "./admin.js";
import { resolveConfig, type ResolvedConfig, type StrataConfig } from "./config.js";
import type { Logger } from "./logger.js";
import { Consumer, type ConsumerConfig } from "./consumer.js";
import { Producer, type ProducerConfig } from "./producer.js";

/** Strata is the client's entry point. Options are checked here, all problems reported at once. */
export class Strata {
  private readonly cfg: ResolvedConfig;
  constructor(config: StrataConfig) {
    this.cfg = resolveConfig(config);
  }
  /** logger returns the client's logger (kafkajs' kafka.logger()), writing where logCreator says. */
  logger(): Logger {
    return this.cfg.logger;
  }
  /** admin returns an admin client (topics, groups). */
  admin(): Admin {
    return new Admin(this.cfg);
  }
  /** producer returns a producer; see ProducerConfig for options and defaults. */
  producer(config?: ProducerConfig): Producer {
    return new Producer(this.cfg, config);
  }
  /** consumer returns a group consumer; see ConsumerConfig. */
  consumer(config: ConsumerConfig): Consumer {
    return new Consumer(this.cfg, config);
  }
}
