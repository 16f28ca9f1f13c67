--[[
job_submit.lua - hand deep-learning jobs to the Rubick scheduler (rubickd).

Enable with `JobSubmitPlugins=lua` in slurm.conf; the file lives next to
slurm.conf. For a job submitted to a managed partition with a model type,
this script
  * appends "rubick:v1 model=NAME class=CLASS" to the job's AdminComment,
    keeping whatever else is there (fields are separated by ';'),
  * holds the job (priority 0) so that only rubickd starts it, after it has
    chosen the job's size, nodes and execution plan,
  * makes it requeueable, because rubickd resizes running jobs by requeueing,
  * tells the user when the job's batch script never mentions rubick-srun
    (WARN_NO_RUBICK_SRUN): rubickd may resize such a job but cannot set its
    execution plan. The job is submitted all the same.
Jobs without a model type, or outside the managed partitions, are untouched.

A user's own hold is kept as the word "rubick:hold" in the job's Comment,
which users may change and AdminComment they may not: `sbatch --hold` and
the user's `scontrol hold` of a managed job write it, and rubickd leaves
such a job held. The user's `scontrol release` takes the word out and
leaves the job held for rubickd, which then sizes and starts it; a release
of a job the user does not hold is refused (only rubickd starts it).

An administrator's `scontrol hold` of a job rubickd holds is kept as the
field "rubick-admin-hold" in its AdminComment, and the job stays in rubick's
hold: Slurm's own hold would end at the release, which would start the job
as submitted. The administrator's `scontrol release` takes the field out and
leaves the job to rubickd; the user's is refused.

Outside the managed partitions (a job moved out with `scontrol update
Partition=`, or MANAGED_PARTITIONS emptied to hand the queue back to Slurm)
holds and releases are Slurm's own, but for an administrator's hold of
rubick's, and a job held for rubickd is released with its move out.
A pending job with a model type moved into a managed partition is tagged
and held for rubickd as at submission; a hold it has stays, as its user's.
A new nice of a held job is refused unless NICE_KEEPS_HOLD: with
PriorityType=priority/basic it would end the hold.

Slurm names a hold that root's update places, or leaves in place,
an administrator's (JobHeldAdmin) whoever it is for. Where this script
leaves a job in rubick's hold at root's change, the AdminComment field
"rubick-held" says the hold is rubick's, and the release that starts the
job takes it out.

Where the model type comes from, first match wins:
  1. `sbatch/salloc/srun --model-type=NAME`: the rubick SPANK plugin puts
     RUBICK_MODEL_TYPE=NAME in the job's SPANK environment;
  2. a `rubick:model=NAME` word in the job comment, for submissions that
     cannot pass SPANK options (slurmrestd), e.g.
     `"comment": "rubick:model=gpt2"`.
A malformed name (not [a-z0-9][a-z0-9._-]{0,63}) or, when MODEL_TYPES_FILE
exists, a name missing from that list rejects the submission.
--]]

-- What this copy does, for `rubickd --check` to compare with what it
-- expects: 2 keeps an administrator's hold in rubick's, leaves holds and
-- releases outside the managed partitions to Slurm (a job moved out is
-- released), and refuses with "Access/permission denied"; 3 tags and holds
-- a job moved in, and marks rubick's holds that Slurm names an
-- administrator's (RUBICK_HELD), and refuses a new nice of a held job
-- unless NICE_KEEPS_HOLD; 4 gives a tagged job the class of its new QOS or
-- account; 5 refuses a model type when the list of them cannot be read, and
-- keeps a hold across a move between partitions rubickd does not manage;
-- 6 changes each record of a job array changed as a whole as its own.
-- Not a setting.
local VERSION = 6

-- ---------------------------------------------------------------- settings

-- Partitions whose model-typed jobs rubickd manages.
local MANAGED_PARTITIONS = { gpu = true }

-- One name per line, '#' comments; the same file as the SPANK plugin's
-- models= argument. When the file does not exist only the syntax is checked.
local MODEL_TYPES_FILE = "/etc/rubick/model-types"

-- Service class by QOS, then by account (explicit or default); the first
-- match wins, otherwise DEFAULT_CLASS.
local CLASS_BY_QOS = { guaranteed = "guaranteed" }
local CLASS_BY_ACCOUNT = {}
local DEFAULT_CLASS = "best-effort"

-- Users allowed to release a held managed job: root and the account rubickd
-- runs as. Others get an error from `scontrol release`.
local SCHEDULER_UIDS = { [0] = true }

-- rubickd grows or shrinks running jobs by requeueing them.
local FORCE_REQUEUE = true

-- Whether slurmctld keeps a held job's hold when its nice changes
-- (`scontrol update JobId=J Nice=N`): with PriorityType=priority/multifactor
-- it does. priority/basic computes the job's priority anew from the nice,
-- at least 2, so the hold ends and the job starts as it is (the default
-- PriorityType before Slurm 23.11). false refuses a new nice of a job held
-- for rubickd; set true with priority/multifactor. rubickd --check compares
-- it with PriorityType.
local NICE_KEEPS_HOLD = false

-- Whether the user of a batch job this script tags whose script never
-- mentions rubick-srun is told at submission (sbatch prints it) that rubickd
-- may resize the job but cannot set its execution plan. The job is never
-- refused: the script may call another that runs rubick-srun.
local WARN_NO_RUBICK_SRUN = true

-- ---------------------------------------------------------------- helpers

local TAG = "rubick:v1"
local HOLD_WORD = "rubick:hold"
-- An administrator's hold of a job rubickd holds, as a field of its
-- AdminComment, which its user cannot change.
local ADMIN_HOLD = "rubick-admin-hold"
-- A hold Slurm names an administrator's (JobHeldAdmin: root's update placed
-- it, or left it in place) that is rubick's, as an AdminComment field.
local RUBICK_HELD = "rubick-held"
local NAME_MAX = 64

local function valid_name(name)
   return type(name) == "string" and #name <= NAME_MAX
      and string.match(name, "^[a-z0-9][a-z0-9._-]*$") ~= nil
end

-- Returns the set of names in MODEL_TYPES_FILE, or nil when it is absent.
-- Read on every managed submission so an edited list applies at once. A
-- list that is there but cannot be read (a directory slurmctld's user may
-- not enter) is an error: skipping it would take any name.
local function load_model_types()
   local f, err, code = io.open(MODEL_TYPES_FILE, "r")
   if f == nil then
      if code == 2 then return nil end -- ENOENT: no list, any valid name
      return false, err
   end
   local set = {}
   for line in f:lines() do
      local name = string.match(string.gsub(line, "#.*$", ""), "^%s*(.-)%s*$")
      if name ~= "" then set[name] = true end
   end
   f:close()
   return set
end

local function model_from_spank_env(job_desc)
   local env = job_desc.spank_job_env
   if env == nil then return nil end
   for _, kv in pairs(env) do
      local v = string.match(kv, "^RUBICK_MODEL_TYPE=(.*)$")
      if v ~= nil then return v end
   end
   return nil
end

local function model_from_comment(job_desc)
   local c = job_desc.comment
   if c == nil then return nil end
   -- a whole word: start of string or after a blank or ';'
   local v = string.match(c, "^rubick:model=([^%s;]*)")
      or string.match(c, "[%s;]rubick:model=([^%s;]*)")
   return v
end

-- The partitions the job asks for; the default partition when none.
local function requested_partitions(job_desc, part_list)
   local names = {}
   if job_desc.partition ~= nil and job_desc.partition ~= "" then
      for p in string.gmatch(job_desc.partition, "[^,]+") do
         table.insert(names, p)
      end
   elseif part_list ~= nil then
      for _, part in pairs(part_list) do
         if part.flag_default == 1 then table.insert(names, part.name) end
      end
   end
   return names
end

local function is_managed(job_desc, part_list)
   for _, p in ipairs(requested_partitions(job_desc, part_list)) do
      if MANAGED_PARTITIONS[p] then return true end
   end
   return false
end

local function service_class(job_desc)
   local qos = job_desc.qos or job_desc.default_qos
   if qos ~= nil and CLASS_BY_QOS[qos] then return CLASS_BY_QOS[qos] end
   local account = job_desc.account or job_desc.default_account
   if account ~= nil and CLASS_BY_ACCOUNT[account] then
      return CLASS_BY_ACCOUNT[account]
   end
   return DEFAULT_CLASS
end

-- Whether a ';'-separated AdminComment field is the rubick:v1 tag.
local function is_tag(field)
   return field == TAG or string.sub(field, 1, #TAG + 1) == TAG .. " "
end

-- The QOS and account a change leaves a job with, for service_class.
local function qos_account(job_desc, job_rec)
   return { qos = job_desc.qos or job_rec.qos, account = job_desc.account or job_rec.account }
end

-- Appends tag to an AdminComment, replacing an earlier rubick:v1 field and
-- keeping every other ';'-separated field in order.
local function with_tag(admin_comment, tag)
   local fields = {}
   if admin_comment ~= nil then
      for field in string.gmatch(admin_comment, "[^;]+") do
         if not is_tag(field) then
            table.insert(fields, field)
         end
      end
   end
   table.insert(fields, tag)
   return table.concat(fields, ";")
end

-- Whether HOLD_WORD is a word of comment (blanks and ';' separate words).
local function has_hold(comment)
   if comment == nil then return false end
   for word in string.gmatch(comment, "[^%s;]+") do
      if word == HOLD_WORD then return true end
   end
   return false
end

-- comment with HOLD_WORD appended, unless it is there.
local function with_hold(comment)
   if has_hold(comment) then return comment end
   if comment == nil or comment == "" then return HOLD_WORD end
   return comment .. " " .. HOLD_WORD
end

-- comment without HOLD_WORD and the separator after it, keeping every
-- other word; " " when nothing else is left: Slurm reads an empty string
-- set here as no change at all (22.05 lab: the word stayed, and with it
-- the hold).
local function without_hold(comment)
   local word = "([%s;])" .. string.gsub(HOLD_WORD, "%p", "%%%0") .. "[%s;]"
   local out, n = " " .. comment .. " ", 1
   while n > 0 do out, n = string.gsub(out, word, "%1") end
   out = string.gsub(out, "^%s+", "")
   out = string.gsub(out, "%s+$", "")
   if out == "" then return " " end
   return out
end

local function trim(s) return (string.gsub(s, "^%s*(.-)%s*$", "%1")) end

-- Whether name is a ';'-separated field of an AdminComment.
local function has_field(admin_comment, name)
   if admin_comment == nil then return false end
   for field in string.gmatch(admin_comment, "[^;]+") do
      if trim(field) == name then return true end
   end
   return false
end

local function has_admin_hold(admin_comment) return has_field(admin_comment, ADMIN_HOLD) end

-- admin_comment with name as its last field, unless it has it.
local function with_field(admin_comment, name)
   if has_field(admin_comment, name) then return admin_comment end
   if admin_comment == nil or admin_comment == "" then return name end
   return admin_comment .. ";" .. name
end

-- admin_comment without name, every other field kept in order (the tag at
-- least: it is never empty).
local function without_field(admin_comment, name)
   local fields = {}
   for field in string.gmatch(admin_comment, "[^;]+") do
      if trim(field) ~= name then table.insert(fields, field) end
   end
   return table.concat(fields, ";")
end

-- What a refused change returns: scontrol prints "Access/permission denied
-- for job N". 22.05 shows no slurm.log_user message from job_modify, and
-- slurm.ERROR read "Unspecified error".
local ACCESS_DENIED = slurm.ESLURM_ACCESS_DENIED or 2002

-- What a refused change of a held job's nice returns: scontrol prints "Job
-- is in held state, pending scheduler release for job N", as Slurm does for
-- a new priority of a held job.
local JOB_HELD = slurm.ESLURM_JOB_HELD or 2042

local function reject(msg)
   slurm.log_user("rubick: %s", msg)
   slurm.log_info("job_submit.lua: rejected: %s", msg)
   return slurm.ERROR
end

-- A change of a tagged job outside the managed partitions: moved out, or
-- its partitions no longer managed (rubickd handing the queue back to
-- Slurm). rubickd does not plan it, so holds and releases are Slurm's own,
-- but an administrator's hold of rubick's (ADMIN_HOLD) stays theirs to
-- release; the marks go with the release.
local function modify_unmanaged(job_desc, job_rec, part_list, modify_uid, comment, ac)
   local prio = job_desc.priority
   if prio == nil or prio == slurm.NO_VAL then
      -- Only a move out of the managed partitions: between others, a hold
      -- is its user's or an administrator's, and stays.
      if job_rec.priority == 0 and job_desc.partition ~= nil and job_desc.partition ~= "" and
         is_managed({ partition = job_rec.partition }, part_list) and
         not has_hold(comment) and not has_admin_hold(ac) then
         -- Moved out while held for rubickd, which no longer plans it:
         -- that hold was never its user's, so the move ends it.
         if has_field(ac, RUBICK_HELD) then
            if not SCHEDULER_UIDS[modify_uid] then
               -- Slurm would refuse its user the end of a hold it names an
               -- administrator's, and the move with it.
               slurm.log_user("rubick: job %s waits for the Rubick scheduler in a hold Slurm " ..
                              "counts as an administrator's; only they can move it out",
                              tostring(job_rec.job_id))
               return ACCESS_DENIED
            end
            job_desc.admin_comment = without_field(ac, RUBICK_HELD)
         end
         job_desc.priority = slurm.INFINITE
         slurm.log_user("rubick: job %s moved out of the Rubick scheduler's partitions; Slurm " ..
                        "starts it as it is", tostring(job_rec.job_id))
      end
      return slurm.SUCCESS
   end
   if prio == 0 or job_rec.priority ~= 0 then return slurm.SUCCESS end
   if has_admin_hold(ac) then
      if not SCHEDULER_UIDS[modify_uid] then
         slurm.log_user("rubick: job %s is held by an administrator; only they can release it",
                        tostring(job_rec.job_id))
         return ACCESS_DENIED
      end
      ac = without_field(ac, ADMIN_HOLD)
   end
   if has_field(ac, RUBICK_HELD) then ac = without_field(ac, RUBICK_HELD) end
   if ac ~= job_rec.admin_comment then job_desc.admin_comment = ac end
   if has_hold(comment) then job_desc.comment = without_hold(comment) end
   return slurm.SUCCESS
end

-- Tells the user of a batch job whose script never mentions rubick-srun
-- that rubickd cannot set its plan. A plain substring test, no shell
-- parsing: any mention counts, a comment too, and a script that only calls
-- another that runs rubick-srun is told (the notice says to ignore it
-- then). salloc and srun send no script. argv[0] is the script's file as
-- sbatch was given it; --wrap and a script on stdin have none.
local function warn_no_rubick_srun(job_desc)
   if not WARN_NO_RUBICK_SRUN then return end
   local script = job_desc.script
   if script == nil or string.find(script, "rubick-srun", 1, true) ~= nil then return end
   local argv = job_desc.argv
   local file = argv ~= nil and argv[0] or nil
   local name, arg = "this script", "FILE"
   if file ~= nil and file ~= "" then name = string.sub(file, 1, 200); arg = name end
   slurm.log_user("rubick: %s runs no rubick-srun: rubickd may resize this job but cannot set " ..
                  "its execution plan; launch with `exec rubick-srun -- ...` (`rubick script %s` " ..
                  "checks it). Ignore this if the script calls another that runs rubick-srun.",
                  name, arg)
end

-- ---------------------------------------------------------------- entry points

-- Why model cannot be a job's model type, or nil.
local function model_error(model)
   if not valid_name(model) then
      return string.format(
         "invalid model type '%s': use 1-%d characters of a-z 0-9 . _ -, " ..
         "starting with a letter or digit", string.sub(model, 1, 80), NAME_MAX)
   end
   local known, err = load_model_types()
   if known == false then
      slurm.log_error("job_submit.lua: model type list unreadable: %s", tostring(err))
      return string.format("the list of model types (%s) cannot be read; ask the administrators", MODEL_TYPES_FILE)
   end
   if known ~= nil and not known[model] then
      return string.format("unknown model type '%s': not in %s", model, MODEL_TYPES_FILE)
   end
   return nil
end

local function new_tag(model, job)
   return string.format("%s model=%s class=%s", TAG, model, service_class(job))
end

-- The class of the rubick:v1 field of an AdminComment; nil without one.
local function tag_class(admin_comment)
   for field in string.gmatch(admin_comment or "", "[^;]+") do
      if is_tag(field) then
         return string.match(field, " class=([^%s]+)")
      end
   end
   return nil
end

-- admin_comment with the class of its rubick:v1 field set to class.
local function with_class(admin_comment, class)
   local fields = {}
   for field in string.gmatch(admin_comment, "[^;]+") do
      if is_tag(field) then
         local n
         field, n = string.gsub(field, " class=[^%s]+", function() return " class=" .. class end, 1)
         if n == 0 then field = field .. " class=" .. class end
      end
      table.insert(fields, field)
   end
   return table.concat(fields, ";")
end

-- A new QOS or account (scontrol update JobId=J QOS=... Account=...) can
-- change a tagged job's class. rubickd reads the class from the tag, so it
-- changes there too; only an administrator can write it, so a user's change
-- that would change the class is refused. Returns nil to go on.
local function new_class(job_desc, job_rec, modify_uid, ac)
   if job_desc.qos == nil and job_desc.account == nil then return nil end
   local class = service_class(qos_account(job_desc, job_rec))
   if class == tag_class(ac) then return nil end
   if not SCHEDULER_UIDS[modify_uid] then
      slurm.log_user("rubick: that would make job %s %s for the Rubick scheduler, which only an " ..
                     "administrator can change: ask them, or submit the job again",
                     tostring(job_rec.job_id), class)
      return ACCESS_DENIED
   end
   job_desc.admin_comment = with_class(ac, class)
   slurm.log_info("job_submit.lua: job %s is %s now (uid %d)", tostring(job_rec.job_id), class, modify_uid)
   return nil
end

-- Whether this change moves a pending job into a managed partition from
-- unmanaged ones.
local function moving_in(job_desc, job_rec, part_list)
   if job_desc.partition == nil or job_desc.partition == "" then return false end
   -- Slurm moves only pending jobs (base state 0, under JOB_STATE_BASE 0xff).
   if job_rec.job_state ~= nil and job_rec.job_state % 256 ~= 0 then return false end
   return is_managed(job_desc, part_list) and
      not is_managed({ partition = job_rec.partition }, part_list)
end

-- A tagged job moved into a managed partition is held for rubickd, as at
-- submission. A hold it has stays, as its user's unless an administrator's
-- of rubick's: who placed it is not known here. Root's update places
-- Slurm's administrator hold, which RUBICK_HELD marks as rubick's.
local function move_in(job_desc, job_rec, modify_uid, comment, ac)
   if job_rec.priority == 0 then
      if not has_admin_hold(ac) then job_desc.comment = with_hold(comment) end
      if job_desc.priority ~= nil and job_desc.priority ~= 0 then job_desc.priority = slurm.NO_VAL end
   else
      job_desc.priority = 0
      if SCHEDULER_UIDS[modify_uid] then ac = with_field(ac, RUBICK_HELD) end
   end
   if ac ~= job_rec.admin_comment then job_desc.admin_comment = ac end
   if FORCE_REQUEUE then job_desc.requeue = 1 end
   slurm.log_user("rubick: job %s moved into the Rubick scheduler's partitions; it starts " ..
                  "on the size and plan the scheduler chooses", tostring(job_rec.job_id))
   slurm.log_info("job_submit.lua: job %s moved in by uid %d: tagged and held",
                  tostring(job_rec.job_id), modify_uid)
   return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local model = model_from_spank_env(job_desc)
   if model == nil then model = model_from_comment(job_desc) end
   if model == nil then return slurm.SUCCESS end
   if not is_managed(job_desc, part_list) then return slurm.SUCCESS end

   local err = model_error(model)
   if err ~= nil then return reject(err) end

   local tag = new_tag(model, job_desc)
   job_desc.admin_comment = with_tag(job_desc.admin_comment, tag)
   if job_desc.priority == 0 then
      -- sbatch --hold: the user's hold, which rubickd keeps.
      job_desc.comment = with_hold(job_desc.comment)
   end
   job_desc.priority = 0
   if FORCE_REQUEUE then job_desc.requeue = 1 end
   slurm.log_info("job_submit.lua: uid %d %s: tagged and held", submit_uid, tag)
   warn_no_rubick_srun(job_desc)
   return slurm.SUCCESS
end

local function modify(job_desc, job_rec, part_list, modify_uid)
   -- Only the scheduler may release a held managed job: a user's
   -- `scontrol release` would start it with the size it was submitted with.
   -- Their own hold is theirs to release (HOLD_WORD).
   local ac = job_desc.admin_comment or job_rec.admin_comment
   local comment = job_desc.comment or job_rec.comment
   local tagged = job_rec.admin_comment ~= nil and string.find(job_rec.admin_comment, TAG, 1, true) ~= nil
   if moving_in(job_desc, job_rec, part_list) then
      if not tagged then
         -- Submitted outside the managed partitions: untagged until now.
         local model = model_from_spank_env(job_rec)
         if model == nil then model = model_from_comment({ comment = comment }) end
         if model == nil then return slurm.SUCCESS end
         local err = model_error(model)
         if err ~= nil then return reject(err) end
         if not SCHEDULER_UIDS[modify_uid] then
            -- Slurm lets only administrators set the AdminComment the tag
            -- goes in; without it the job would run as submitted.
            slurm.log_user("rubick: job %s was submitted outside the Rubick scheduler's " ..
                           "partitions; submit it again to run it there, or ask an " ..
                           "administrator to move it", tostring(job_rec.job_id))
            return ACCESS_DENIED
         end
         ac = with_tag(ac, new_tag(model, qos_account(job_desc, job_rec)))
      end
      return move_in(job_desc, job_rec, modify_uid, comment, ac)
   end
   if not tagged then return slurm.SUCCESS end
   local prio = job_desc.priority
   if not is_managed({ partition = job_desc.partition or job_rec.partition }, part_list) then
      return modify_unmanaged(job_desc, job_rec, part_list, modify_uid, comment, ac)
   end
   local rc = new_class(job_desc, job_rec, modify_uid, ac)
   if rc ~= nil then return rc end
   ac = job_desc.admin_comment or ac
   if not NICE_KEEPS_HOLD and job_rec.priority == 0 and job_desc.nice ~= nil and job_desc.nice ~= slurm.NO_VAL then
      slurm.log_user("rubick: job %s waits for the Rubick scheduler, and a new nice would " ..
                     "release it as it is: set it with sbatch --nice, or once the job runs",
                     tostring(job_rec.job_id))
      return JOB_HELD
   end
   if job_desc.comment ~= nil and job_rec.priority == 0 and has_hold(job_rec.comment) and
      not has_hold(job_desc.comment) and (prio == nil or prio == slurm.NO_VAL or prio == 0) then
      -- A new comment of a job its user holds keeps the word: without it
      -- the hold would read as rubick's, the user's release would be
      -- refused, and rubickd would start the job.
      job_desc.comment = with_hold(job_desc.comment)
      comment = job_desc.comment
   end
   if prio == nil or prio == slurm.NO_VAL then return slurm.SUCCESS end
   if SCHEDULER_UIDS[modify_uid] then
      -- rubickd neither holds jobs nor releases one held by its user or an
      -- administrator: these are an administrator's.
      if prio == 0 then
         -- The hold of a job rubickd holds stays rubick's, marked: Slurm's
         -- own (JobHeldAdmin) would end at the release, which would start
         -- the job as submitted. A job rubickd released (or one Slurm
         -- already holds) gets Slurm's.
         if job_rec.priority == 0 then
            job_desc.priority = slurm.NO_VAL
            job_desc.admin_comment = with_field(ac, ADMIN_HOLD)
            slurm.log_user("rubick: job %s held; scontrol release hands it back to the Rubick " ..
                           "scheduler", tostring(job_rec.job_id))
         end
         return slurm.SUCCESS
      end
      if job_rec.priority ~= 0 then return slurm.SUCCESS end
      if has_admin_hold(ac) or has_hold(comment) then
         -- The release of the administrator's hold, or the user's, hands
         -- the job to rubickd: it stays held until rubickd sizes and starts
         -- it. Slurm may name the hold left an administrator's, so it is
         -- marked rubick's.
         if has_hold(comment) then job_desc.comment = without_hold(comment) end
         job_desc.admin_comment = with_field(without_field(ac, ADMIN_HOLD), RUBICK_HELD)
         job_desc.priority = slurm.NO_VAL
         return slurm.SUCCESS
      end
      -- rubickd's release, which starts the job, or an administrator's of
      -- Slurm's own hold: the mark goes with the hold.
      if has_field(ac, RUBICK_HELD) then job_desc.admin_comment = without_field(ac, RUBICK_HELD) end
      return slurm.SUCCESS
   end
   if prio == 0 then
      -- scontrol hold: Slurm reports it as it does the hold rubickd
      -- releases, so the word says it is the user's.
      job_desc.comment = with_hold(comment)
      return slurm.SUCCESS
   end
   if job_rec.priority ~= 0 then return slurm.SUCCESS end
   if has_admin_hold(ac) then
      slurm.log_user("rubick: job %s is held by an administrator; only they can release it",
                     tostring(job_rec.job_id))
      return ACCESS_DENIED
   end
   if has_hold(comment) then
      -- The user's release of their hold: the job stays held for rubickd,
      -- which starts it on the size and plan it chooses.
      job_desc.comment = without_hold(comment)
      job_desc.priority = slurm.NO_VAL
      slurm.log_user("rubick: job %s released from your hold; the Rubick " ..
                     "scheduler starts it", tostring(job_rec.job_id))
      return slurm.SUCCESS
   end
   slurm.log_user("rubick: job %s is started by the Rubick scheduler; " ..
                  "it cannot be released by hand", tostring(job_rec.job_id))
   return ACCESS_DENIED
end

-- Slurm changes the records of a job array, or the components of a
-- heterogeneous job, updated as a whole (scontrol update JobId=ARRAY ...)
-- one after another with one request, which this script edits in place:
-- without care, the comment or hold it wrote for one record would reach the
-- next (a task released from its user's hold would get the hold word of
-- the tasks still held). So the fields it writes are kept as they were
-- sent, and put back for the next record of the same request. That request
-- is the one left by the call before, for another record, within a second.
local MODIFY_FIELDS = { "admin_comment", "comment", "priority", "requeue" }
local last_modify = nil

-- The C request behind job_desc, which Slurm names in its metatable; nil
-- where it does not.
local function request_key(job_desc)
   local mt = getmetatable(job_desc)
   if type(mt) ~= "table" then return nil end
   return rawget(mt, "_job_desc")
end

local function modify_fields(job_desc)
   local t = {}
   for _, f in ipairs(MODIFY_FIELDS) do t[f] = job_desc[f] end
   return t
end

-- The fields of the request as sent: those of job_desc, or, for the next
-- record of the request the call before saw, that call's.
local function sent_fields(job_desc, job_rec, key)
   local now = modify_fields(job_desc)
   local prev = last_modify
   last_modify = nil
   if key == nil or prev == nil or prev.key ~= key or prev.job_id == job_rec.job_id or
      os.difftime(os.time(), prev.at) > 1 then
      return now
   end
   for _, f in ipairs(MODIFY_FIELDS) do
      if now[f] ~= prev.left[f] then return now end
   end
   for _, f in ipairs(MODIFY_FIELDS) do
      if prev.left[f] ~= prev.sent[f] then
         -- A string not sent cannot be unset again: the record's own value
         -- changes nothing ("" is no value, where the record has none).
         local v = prev.sent[f]
         if v == nil then v = job_rec[f] or "" end
         job_desc[f] = v
      end
   end
   return prev.sent
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   local key = request_key(job_desc)
   local sent = sent_fields(job_desc, job_rec, key)
   local rc = modify(job_desc, job_rec, part_list, modify_uid)
   if key ~= nil then
      last_modify = { key = key, job_id = job_rec.job_id, at = os.time(), sent = sent,
                      left = modify_fields(job_desc) }
   end
   return rc
end

slurm.log_info("job_submit.lua: rubick job submit filter loaded")
return slurm.SUCCESS
